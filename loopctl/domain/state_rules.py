"""The rules of a loop's entry in state.json (DESIGN §2, §11): the statuses,
reasons and outcomes, and SCHEMA, each field's rule, initial value and
repair value. `clean_entry` checks an untrusted entry field by field;
domain/state.py's `LoopState.from_json` makes the record of what it kept.

state.json is loopctl's own file, but a disk, an editor, a bug or (in a team
store) another machine can damage it: every entry that loopctl did not write
itself, as it is, passes these checks before anything reads it.
"""

from __future__ import annotations

from loopctl.domain import untrusted as check
from loopctl.domain.model import MAX_NO_PROGRESS
from loopctl.domain.names import is_run_id
from loopctl.domain.tally import check_tally
from loopctl.fast.data_class import record

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

ACTIVE, PAUSED = "active", "paused"
TERMINAL = ("completed", "failed", "stopped", "expired")
STATUSES = (ACTIVE, PAUSED, *TERMINAL)
REASONS = ("user", "blocked", "iteration_limit", "failure_limit", "no_progress",
           "budget_limit", "keepalive_exhausted", "rate_limited", "auth_required", "deferral_limit",
           "error")
OUTCOMES = check.OUTCOMES
RECENT = 10


# -- a damaged state.json (DESIGN §11) -------------------------------------
#
# state.json is loopctl's own file, but a disk, an editor or a bug can damage
# it. Each loop's entry is checked field by field when it is read: a bad value
# is replaced by a safe default and the loop pauses with reason `error` and a
# note naming the field, so its bounds are never guessed and every other loop
# keeps firing.


def _proc(value: Any) -> Any:
    if value is None:
        return None
    if not isinstance(value, dict) or check.count(value.get("pid"), 2**31) is None \
            or value["pid"] < 1 or check.moment(value.get("ct")) is None:
        return check.INVALID
    ref = {"pid": value["pid"], "ct": float(value["ct"])}
    # A team store's: whose pid, the run whose claim says if it lives (pid 1: a container's).
    machine, run_id = value.get("machine"), value.get("run")
    if machine is None and run_id is None:
        return ref if value["pid"] > 1 else check.INVALID
    if check.text(machine, 200) is None or not is_run_id(run_id):
        return check.INVALID
    return {**ref, "machine": machine, "run": run_id}


def _run(value: Any) -> Any:
    """A claimed run; its `spec` is a definition, checked again when used."""
    if value is None:
        return None
    if not isinstance(value, dict) or not is_run_id(value.get("run_id")) \
            or check.count(value.get("iteration")) is None \
            or check.moment(value.get("due_at")) is None \
            or check.count(value.get("missed", 0)) is None \
            or value.get("trigger") not in (None, "schedule", "manual", "api") \
            or value.get("slot") is not None and check.text(value["slot"], 100) is None \
            or check.count(value.get("triggers", 0)) is None \
            or value.get("machine") is not None and check.text(value["machine"], 200) is None \
            or not isinstance(value.get("spec", {}), dict) \
            or not isinstance(value.get("hook"), (str, type(None))) \
            or not isinstance(value.get("notify", []), list) \
            or not all(isinstance(u, str) for u in value.get("notify", [])):
        return check.INVALID
    for key in ("claimed_at", "started_at"):
        if value.get(key) is not None and check.moment(value[key]) is None:
            return check.INVALID
    if value.get("queued_s") is not None and check.number(value["queued_s"], 0.0, 1e12) is None:
        return check.INVALID
    for key in ("supervisor", "agent"):
        if _proc(value.get(key)) is check.INVALID:
            return check.INVALID
        if value.get(key) is not None:
            value[key] = _proc(value[key])  # only the fields a ref has
    return value


def _choice(options: tuple[Any, ...]) -> Any:
    return lambda v: v if v in options else check.INVALID


def _optional(rule: Any) -> Any:
    return lambda v: None if v is None else (check.INVALID if rule(v) is None else rule(v))


def _required(rule: Any) -> Any:
    return lambda v: check.INVALID if (r := rule(v)) is None else r


def _strings(limit: int, options: tuple[str, ...] | None = None) -> Any:
    def rule(v: Any) -> Any:
        if not isinstance(v, list) or len(v) > limit or not all(
                isinstance(x, str) and len(x) <= 64 and (options is None or x in options)
                for x in v):
            return check.INVALID
        return v
    return rule


def _paths(v: Any, limit: int) -> Any:
    """None, or up to `limit` absolute paths on one line each."""
    if v is None:
        return None
    if not isinstance(v, list) or len(v) > limit or not all(
            isinstance(p, str) and p.startswith("/") and len(p) <= 4096
            and not any(c in p for c in "\0\n\r") for p in v):
        return check.INVALID
    return v


def _decision(v: Any) -> Any:
    if v is None:
        return None
    if not isinstance(v, dict) or v.get("decision") not in (None, *check.DECISIONS) or any(
            v.get(k) is not None and check.text(v[k], check.MAX_DECISION_TEXT) is None
            for k in ("summary", "evidence")):
        return check.INVALID
    # `source: check`: a completion the check verified (--until-check).
    source = {"source": "check"} if v.get("source") == "check" else {}
    return {**{k: v.get(k) for k in ("decision", "summary", "evidence")}, **source}


def _delivery_error(v: Any) -> Any:
    if v is None:
        return None
    if not isinstance(v, dict) or check.moment(v.get("at")) is None \
            or check.text(v.get("message"), 1000) is None:
        return check.INVALID
    return v


def _triggered(v: Any) -> Any:
    if v is None:
        return None
    if not isinstance(v, dict) or check.count(v.get("count")) is None or v["count"] < 1 \
            or check.moment(v.get("at")) is None:
        return check.INVALID
    return {"count": v["count"], "at": float(v["at"])}


def _last_check(v: Any) -> Any:
    if v is None:
        return None
    from loopctl.domain.run_parts import KeptCheck

    kept = KeptCheck.from_json(v)
    return check.INVALID if kept is None else kept.to_json()


def tracked_pr(v: Any) -> Any:
    """The PR a loop follows: its URL as gh printed it, a branch that is
    no option and no path, the fix runs so far, whether it was left for
    review."""
    if v is None:
        return None
    from loopctl.domain.feedback import PR_URL

    if not isinstance(v, dict) or not isinstance(v.get("url"), str) \
            or not PR_URL.fullmatch(v["url"]) or check.text(v.get("branch"), 300) is None \
            or v["branch"].startswith("-") or ".." in v["branch"] \
            or check.count(v.get("fixes"), 1000) is None \
            or not isinstance(v.get("review"), bool):
        return check.INVALID
    return {k: v[k] for k in ("url", "branch", "fixes", "review")}


def _slots(v: Any) -> Any:
    from loopctl.domain.slots import check_slots

    return check_slots(v)


def _skips(v: Any) -> Any:
    from loopctl.domain.slots import check_skips

    return check_skips(v)


_SAME = object()


@record(frozen=True)
class Field:
    rule: Any  # the clean value, or check.INVALID
    initial: Any  # in a new entry
    repaired: Any  # in place of a bad value


def _field(rule: Any, repaired: Any, initial: Any = _SAME) -> Field:
    return Field(rule, repaired if initial is _SAME else initial, repaired)


SCHEMA: dict[str, Field] = {
    "status": _field(_choice(STATUSES), PAUSED, initial=ACTIVE),
    "reason": _field(_choice((None, *REASONS)), "error", initial=None),
    # None: filled in from the definition by `lifecycle.reconcile`.
    "created": _field(_optional(check.moment), None),
    "deadline": _field(_optional(check.moment), None),
    "schedule_key": _field(_required(lambda v: check.text(v, 300)), ""),
    "next_due": _field(_optional(check.moment), None),
    "iterations": _field(_required(check.count), 0),
    "failures": _field(_required(check.count), 0),
    "seq": _field(_required(check.count), 0),
    "last_end": _field(_optional(check.moment), None),
    "last_outcome": _field(_choice((None, *OUTCOMES)), None),
    "last_run_id": _field(lambda v: v if v is None or is_run_id(v) else check.INVALID, None),
    "outcomes": _field(_strings(RECENT, OUTCOMES), []),
    "run": _field(_run, None),
    "pending": _field(_choice((True, False)), False),
    "after_run": _field(_choice((None, "pause", "stop")), None),
    "orphan": _field(_proc, None),
    "cost_usd": _field(_required(lambda v: check.number(v, 0.0, 1e12)), 0.0),
    "session_id": _field(_optional(check.session_id), None),
    "keepalive_misses": _field(_required(check.count), 0),
    "results": _field(_strings(MAX_NO_PROGRESS), []),
    "last_decision": _field(_decision, None),
    "ended_at": _field(_optional(check.moment), None),
    "observed_at": _field(_optional(check.moment), None),
    "resume_at": _field(_optional(check.moment), None),
    "note": _field(_optional(lambda v: check.text(v, 2000)), None),
    "deferrals": _field(_required(check.count), 0),
    "hook_error": _field(_delivery_error, None),
    "notify_error": _field(_delivery_error, None),
    "last_handoff": _field(lambda v: v if v is None or isinstance(v, dict) and all(
        isinstance(k, str) and isinstance(x, (str, int, bool)) for k, x in v.items())
        else check.INVALID, None),
    "triggered": _field(_triggered, None),
    "last_check": _field(_last_check, None),
    "pr_feedback": _field(tracked_pr, None),
    "queued_at": _field(_optional(check.moment), None),
    "max_run_cost": _field(_required(lambda v: check.number(v, 0.0, 1e12)), 0.0),
    "cost_estimated": _field(_choice((True, False)), False),
    "repository": _field(lambda v: _paths(v, 3), None),
    "slots": _field(_slots, None),
    "skips": _field(_skips, None),
    "tally": _field(check_tally, None),
}


# Keys added after state version 1 first shipped: their absence is not damage.
LATE_KEYS = frozenset({"deferrals", "hook_error", "notify_error", "last_handoff",
                       "triggered", "last_check", "pr_feedback", "queued_at",
                       "max_run_cost", "cost_estimated", "repository", "slots", "skips", "tally"})


def clean_entry(name: str, st: Any) -> tuple[dict[str, Any], list[str]]:
    """A sane copy of one loop's entry (every SCHEMA field, in SCHEMA's
    order) and the fields that were not."""
    whole = isinstance(st, dict)
    source: dict[str, Any] = st if whole else {}
    bad: list[str] = [] if whole else ["the entry itself"]
    clean: dict[str, Any] = {}
    for key, field in SCHEMA.items():
        value = field.rule(source.get(key, field.repaired))
        if whole and (value is check.INVALID or key not in source and key not in LATE_KEYS):
            bad.append(key)
        clean[key] = field.repaired if value is check.INVALID else value
    if bad:
        fields = ", ".join(bad[:5]) + (" ..." if len(bad) > 5 else "")
        if clean["status"] not in TERMINAL:
            clean["status"], clean["reason"] = PAUSED, "error"
        clean["note"] = (f"state.json had bad values for {fields}; they were reset: check "
                         f"the loop, then `loopctl resume {name}`")[:2000]
    return clean, bad
