"""The run record, `runs/<loop>/<run-id>.json`: its one schema.

The supervisor and the driver that finds a run lost build records with
`RunRecord.new` (domain/run_record.py), which refuses a field the schema does
not name; `history`, `digest` and pruning read them back through
`RunRecord.from_json`, which cleans them here (`clean_record`): the schema's
fields of the right type, the rest named `damaged`. A field added to what a
run records is added here and as a field of `RunRecord` (a test holds the
two to the same names), or the run that writes it fails its tests.
"""

from __future__ import annotations

from loopctl.domain import untrusted
from loopctl.domain.run_parts import CheckRecord, GateRecord, PlanRecord
from loopctl.domain.run_record import RunRecord

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

TEXT_FIELDS = ("loop", "trigger", "due_at", "started_at", "ended_at", "observed_at",
               "outcome", "session_id", "result", "log", "note", "status_after",
               "handoff", "branch", "base", "base_ref", "head", "pr_url", "handoff_error",
               "needs_review", "handoff_note", "sandbox", "agent", "fallback_from", "slot",
               "machine")
NUMBER_FIELDS = ("iteration", "duration_s", "exit_code", "missed", "cost_usd",
                 "next_delay_s", "commits", "files_changed", "insertions", "deletions",
                 "triggers", "queued_s", "protected_count")
# Checked by clean_record on their own terms.
OTHER_FIELDS = ("version", "run_id", "decision", "argv", "merged", "left_out", "log_truncated",
                "damaged", "gate", "check", "pr_feedback", "cost_estimated", "protected")
FIELDS = frozenset((*TEXT_FIELDS, *NUMBER_FIELDS, *OTHER_FIELDS))


def _left_out(value: Any) -> list[dict[str, Any]] | None:
    """The hand-off's files over --max-file-size: {"path", "bytes"} each."""
    if not isinstance(value, list):
        return None
    return [{"path": untrusted.text(item.get("path"), 4000),
             "bytes": untrusted.number(item.get("bytes"), 0, 1e15)}
            for item in value[:1000] if isinstance(item, dict)]


def _protected(value: Any) -> list[str] | None:
    """The protected paths the agent changed (DESIGN §16)."""
    if not isinstance(value, list):
        return None
    return [t for item in value[:100] if (t := untrusted.text(item, 4000))]


def _when_present(raw: dict[str, Any], out: dict[str, Any]) -> list[str]:
    """Fields only some runs have, kept only where they are: the damaged."""
    if raw.get("protected") is None:
        return []
    out["protected"] = _protected(raw["protected"])
    return ["protected"] if out["protected"] is None else []


def _lost(raw: dict[str, Any], out: dict[str, Any], keys: tuple[str, ...]) -> list[str]:
    """The keys that held a value that was not kept: the damaged."""
    return [k for k in keys if raw.get(k) is not None and out[k] is None]


def _parts(raw: dict[str, Any], out: dict[str, Any]) -> list[str]:
    """The parts that are records of their own (domain/run_parts), each
    None when it is not that part's shape: the damaged."""
    out["gate"] = GateRecord.from_json(raw.get("gate"))
    out["check"] = CheckRecord.from_json(raw.get("check"))
    damaged = _lost(raw, out, ("gate", "check")) + _when_present(raw, out)
    feedback = raw.get("pr_feedback")  # a fix run's only
    out["pr_feedback"] = None if feedback is None else PlanRecord.from_json(feedback)
    return damaged + _lost(raw, out, ("pr_feedback",))


def clean_record(data: Any, run_id: str) -> RunRecord:
    """A record as `history` can show it: known fields of the right type;
    what was not is named in `damaged` (the keys of a newer loopctl are
    `RunRecord.from_json`'s)."""
    raw = data if isinstance(data, dict) else {}
    damaged = [] if isinstance(data, dict) else ["the record itself"]
    out: dict[str, Any] = {"version": 1, "run_id": run_id}
    for key in TEXT_FIELDS:
        out[key] = untrusted.text(raw.get(key), 4000)
    for key in NUMBER_FIELDS:
        out[key] = untrusted.number(raw.get(key), -1e15, 1e15)
        if out[key] is not None and float(out[key]).is_integer() and key != "duration_s":
            out[key] = int(out[key])
    decision = raw.get("decision")
    out["decision"] = {k: untrusted.text(decision.get(k), 4000)
                       for k in ("decision", "summary", "evidence")} \
        if isinstance(decision, dict) else None
    out["merged"] = raw.get("merged") if isinstance(raw.get("merged"), bool) else None
    out["left_out"] = _left_out(raw.get("left_out"))
    out["log_truncated"] = raw.get("log_truncated") is True
    if raw.get("cost_estimated") is True:  # DESIGN §18: the cost is loopctl's estimate
        out["cost_estimated"] = True
    damaged += _parts(raw, out)
    argv = raw.get("argv")
    out["argv"] = argv if isinstance(argv, list) and all(isinstance(a, str) for a in argv) \
        else None
    damaged += _lost(raw, out, (*TEXT_FIELDS, *NUMBER_FIELDS, "decision", "argv"))
    if raw.get("run_id") != run_id:
        damaged.append("run_id")
    if out["outcome"] not in untrusted.OUTCOMES:
        out["outcome"] = "unknown"
        damaged.append("outcome")
    if damaged:
        out["damaged"] = damaged
    made = RunRecord(keys=list(out))  # the fields in history's order
    for key, value in out.items():
        setattr(made, key, value)
    return made
