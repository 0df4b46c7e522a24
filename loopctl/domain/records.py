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


def _gate(value: Any) -> dict[str, Any] | None:
    """`{exit_code, output_tail}` of the run's gate (DESIGN §17)."""
    if not isinstance(value, dict):
        return None
    code = untrusted.number(value.get("exit_code"), -1e9, 1e9)
    return {"exit_code": int(code) if code is not None else None,
            "output_tail": untrusted.text(value.get("output_tail"), 16 * 1024) or ""}


def _check(value: Any) -> dict[str, Any] | None:
    """`{exit_code, passed, duration_s, output_tail, metric}` of the run's
    check (DESIGN §16); a metric that is not a finite number is dropped."""
    if not isinstance(value, dict) or not isinstance(value.get("passed"), bool):
        return None
    code = untrusted.number(value.get("exit_code"), -1e9, 1e9)
    out = {"exit_code": int(code) if code is not None else None,
           "passed": value["passed"],
           "duration_s": untrusted.number(value.get("duration_s"), 0, 1e9),
           "output_tail": untrusted.text(value.get("output_tail"), 16 * 1024) or "",
           "metric": untrusted.number(value.get("metric"), -1e308, 1e308)}
    why = untrusted.text(value.get("why"), 200)
    if why and code is None:  # why there was no exit code (`check cannot start ...`)
        out["why"] = why
    return out


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


def clean_record(data: Any, run_id: str) -> dict[str, Any]:
    """A record as `history` can show it: known fields of the right type;
    what was not is named in `damaged`."""
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
    out["gate"] = _gate(raw.get("gate"))
    if raw.get("gate") is not None and out["gate"] is None:
        damaged.append("gate")
    out["check"] = _check(raw.get("check"))
    if raw.get("check") is not None and out["check"] is None:
        damaged.append("check")
    damaged += _when_present(raw, out)
    out["pr_feedback"] = None
    if raw.get("pr_feedback") is not None:  # a fix run's only: its rules not imported else
        from loopctl.domain.feedback import clean_plan_record

        out["pr_feedback"] = clean_plan_record(raw["pr_feedback"])
        if out["pr_feedback"] is None:
            damaged.append("pr_feedback")
    argv = raw.get("argv")
    out["argv"] = argv if isinstance(argv, list) and all(isinstance(a, str) for a in argv) \
        else None
    damaged += [k for k in (*TEXT_FIELDS, *NUMBER_FIELDS, "decision", "argv")
                if raw.get(k) is not None and out[k] is None]
    if raw.get("run_id") != run_id:
        damaged.append("run_id")
    if out["outcome"] not in untrusted.OUTCOMES:
        out["outcome"] = "unknown"
        damaged.append("outcome")
    if damaged:
        out["damaged"] = damaged
    return out
