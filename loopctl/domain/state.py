"""Runtime state of loops: the shape of `state.json` and its pure helpers.

One entry per loop, keyed by name. Times are POSIX seconds. The top level
carries what the `tick` fast path needs to decide, without loading YAML or
taking a lock, that nothing is due: the signature of the `loops.yaml` the
state was reconciled against, the earliest time anything needs attention
(`wake_at`) and whether any run is in flight (`busy`).
"""

from __future__ import annotations

from datetime import tzinfo

from loopctl.domain import untrusted as check
from loopctl.domain.model import MAX_NO_PROGRESS, LoopDef
from loopctl.domain.names import is_loop_name, is_run_id
from loopctl.domain.schedule import first_fire
from loopctl.domain.tally import check_tally
from loopctl.domain.timestamps import UTC, parse_iso
from loopctl.fast.data_class import record

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any
    from typing import TypedDict as _Shape
else:
    # At run time a plain class holding the annotations as written: a
    # TypedDict compiles each of its ~50 annotations into a ForwardRef
    # (~15M instructions, 5% of a `loopctl run`); state entries are dicts.
    _Shape = object

ACTIVE, PAUSED = "active", "paused"
TERMINAL = ("completed", "failed", "stopped", "expired")
STATUSES = (ACTIVE, PAUSED, *TERMINAL)
REASONS = ("user", "blocked", "iteration_limit", "failure_limit", "no_progress",
           "budget_limit", "keepalive_exhausted", "rate_limited", "auth_required", "deferral_limit",
           "error")
OUTCOMES = check.OUTCOMES
RECENT = 10



class LoopState(_Shape):
    """One loop's entry in state.json. SCHEMA below holds each field's rule,
    initial value and repair value: construction and repair share it."""

    status: str
    reason: str | None
    # None only between `repair` and `lifecycle.reconcile`, which fills both
    # in from the definition before anything reads them.
    created: float
    deadline: float
    schedule_key: str
    next_due: float | None
    iterations: int
    failures: int
    seq: int
    last_end: float | None
    last_outcome: str | None
    last_run_id: str | None
    outcomes: list[str]
    run: dict[str, Any] | None
    pending: bool
    after_run: str | None
    orphan: dict[str, Any] | None
    cost_usd: float
    session_id: str | None
    keepalive_misses: int
    results: list[str]
    last_decision: dict[str, Any] | None
    ended_at: float | None
    observed_at: float | None
    resume_at: float | None
    note: str | None
    deferrals: int
    hook_error: dict[str, Any] | None
    notify_error: dict[str, Any] | None
    last_handoff: dict[str, Any] | None
    # Triggers accepted since the last fire (DESIGN §17): {"count", "at"}.
    triggered: dict[str, Any] | None
    # The last check's {run_id, exit_code, passed, metric} (DESIGN §16).
    last_check: dict[str, Any] | None
    # The newest PR the loop opened (DESIGN §16): {"url", "branch", "fixes",
    # "review"}; rules in domain/feedback.
    pr_feedback: dict[str, Any] | None
    # Due, but held by a concurrency cap since then (DESIGN §18).
    queued_at: float | None
    # The most a run of this loop has cost: the estimate for a run whose
    # cost could not be read (DESIGN §18).
    max_run_cost: float
    # Some of cost_usd is estimated: `status` says "at least" (DESIGN §18).
    cost_estimated: bool
    # The repository a confined run may read, found when loopctl first
    # learned of the loop (DESIGN §14); None: not looked up yet.
    repository: list[str] | None
    # Schedule slots served or skipped (DESIGN §20): {"high", "recent"},
    # rules in domain/slots.
    slots: dict[str, Any] | None
    # Due slots that did not run, by reason, and the last (DESIGN §20).
    skips: dict[str, Any] | None
    # Counters /metrics serves, bumped as each run settles (DESIGN §19);
    # rules in domain/tally. None: no run settled since it was added.
    tally: dict[str, Any] | None


@record
class RunResult:
    outcome: str
    exit_code: int | None
    started_at: float
    ended_at: float
    decision: dict[str, Any] | None = None
    result_text: str | None = None
    session_id: str | None = None
    cost_usd: float | None = None
    note: str | None = None
    reset_at: float | None = None
    # Only agent presets feed the no-progress breaker: a cron-style shell job
    # printing the same line every time is working, not stuck.
    track_progress: bool = False
    check: dict[str, Any] | None = None  # the record's `check`, when it ran
    # The limit or refused login was read from free text only, not from the
    # CLI's own fields: it holds this loop alone, for at most an hour (§18).
    loop_only: bool = False
    tokens: int | None = None  # tokens the reader saw the run use, if any
    # The agent succeeded but its check did not (outcome `failed`, §16).
    check_failed: bool = False


def new_loop_state(loop: LoopDef, now: float, *, zone: tzinfo) -> LoopState:
    """A fresh entry: every field of SCHEMA at its initial value (a copy
    of one made once, each list its own: `ls` of a hand-written file of
    10,000 loops makes 10,000 of these)."""
    if not _INITIAL:
        _INITIAL.update({key: field.initial for key, field in SCHEMA.items()})
        _LISTS.extend(key for key, value in _INITIAL.items() if isinstance(value, list))
    created = parse_iso(loop.created_at) if loop.created_at else now
    st: LoopState = dict(_INITIAL)  # type: ignore[assignment]
    for key in _LISTS:
        st[key] = list(_INITIAL[key])  # type: ignore[literal-required]
    st["created"], st["deadline"] = created, created + loop.for_s
    st["schedule_key"], st["next_due"] = loop.schedule_key, first_fire(loop, created, zone=zone)
    return st


_INITIAL: dict[str, Any] = {}
_LISTS: list[str] = []


# -- state.json's entries on disk (version 2) --------------------------------
#
# Most fields of most loops hold what every new loop starts with (no run, no
# failure, no note): written out, they were 400 of an idle loop's 530 bytes
# in state.json, which every `ls`, `status` and driver pass decodes. An entry
# on disk leaves out each field at that common value; reading puts it back,
# so in memory every entry has every field.

# Fields a definition decides: never left out.
PER_LOOP = frozenset({"status", "created", "deadline", "schedule_key", "next_due"})
_COMMON: dict[str, Any] = {}
_MUTABLE: list[str] = []  # the common values that are lists or mappings


def common_values() -> dict[str, Any]:
    """What every new entry holds, whatever its loop: derived from
    `new_loop_state`, so a field added there is packed with no edit here."""
    if not _COMMON:
        probe = new_loop_state(LoopDef(name="probe"), 0.0, zone=UTC)
        _COMMON.update({k: v for k, v in probe.items() if k not in PER_LOOP})
        _MUTABLE.extend(k for k, v in _COMMON.items() if isinstance(v, (list, dict)))
    return _COMMON


def pack(st: LoopState) -> dict[str, Any]:
    """The entry as written: the fields that differ from `common_values`,
    in value or in type (a `0` left out would be read back as `False`)."""
    common = common_values()
    return {k: v for k, v in st.items()
            if k not in common or v != (c := common[k]) or type(v) is not type(c)}


def unpack(entry: Any) -> Any:
    """An entry read from disk with its left-out fields filled in (each
    list a fresh one: entries must never share a mutable value). Anything
    but a mapping is returned as it is, for `repair` to judge."""
    if not isinstance(entry, dict):
        return entry
    full = {**common_values(), **entry}
    for key in _MUTABLE:
        if key not in entry:
            full[key] = type(full[key])()
    return full


def wake_time(st: LoopState) -> float | None:
    """When this loop next needs a driver's attention, if ever."""
    if st["status"] in TERMINAL:
        return None
    times = [st["deadline"] if st["deadline"] is not None else 0.0]
    due, resume = st.get("next_due"), st.get("resume_at")
    if st["status"] == ACTIVE and due is not None:
        times.append(due)
    if resume is not None:
        times.append(resume)
    return min(times)


def past_deadline(st: LoopState, now: float) -> bool:
    """The calendar deadline has passed (unknown until reconciled: not yet)."""
    deadline = st["deadline"]
    return deadline is not None and now >= deadline


def in_flight(state: dict[str, Any]) -> bool:
    """A run, or the orphaned agent of a lost one, is still going somewhere."""
    return any(st.get("run") or st.get("orphan") for st in state["loops"].values())


def summarize(state: dict[str, Any]) -> None:
    """Recompute the fast-path fields from the loop entries."""
    wakes = [w for st in state["loops"].values() if (w := wake_time(st)) is not None]
    state["wake_at"] = min(wakes) if wakes else None
    state["busy"] = in_flight(state)


def display_status(st: LoopState | dict[str, Any] | None) -> str:
    if st is None:
        return "invalid"
    if st.get("run"):
        return "running"
    if st.get("queued_at") is not None and st["status"] == ACTIVE:
        return "queued"
    return str(st["status"])


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
    # An exit code as loopctl records one (a whole number, 128+N for a
    # signal, None when there was none), and `passed` only with exit 0: a
    # damaged entry must not have the envelope say "passed (exit 0)" of a 3.
    if not isinstance(v, dict) or not is_run_id(v.get("run_id")) \
            or not isinstance(v.get("passed"), bool) \
            or v.get("exit_code") is not None and check.count(v["exit_code"], 1000) is None \
            or v["passed"] != (v.get("exit_code") == 0) \
            or v.get("metric") is not None and check.number(v["metric"], -1e308, 1e308) is None:
        return check.INVALID
    kept = {k: v.get(k) for k in ("run_id", "exit_code", "passed", "metric")}
    why = v.get("why")
    if isinstance(why, str) and why and v.get("exit_code") is None:
        kept["why"] = check.line(why)[:200]  # hand-edited text: one plain line
    return kept


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
    "pr_feedback": _field(lambda v: tracked_pr(v), None),
    "queued_at": _field(_optional(check.moment), None),
    "max_run_cost": _field(_required(lambda v: check.number(v, 0.0, 1e12)), 0.0),
    "cost_estimated": _field(_choice((True, False)), False),
    "repository": _field(lambda v: _paths(v, 3), None),
    "slots": _field(lambda v: _slots(v), None),
    "skips": _field(lambda v: _skips(v), None),
    "tally": _field(check_tally, None),
}


# Keys added after state version 1 first shipped: their absence is not damage.
LATE_KEYS = frozenset({"deferrals", "hook_error", "notify_error", "last_handoff",
                       "triggered", "last_check", "pr_feedback", "queued_at",
                       "max_run_cost", "cost_estimated", "repository", "slots", "skips", "tally"})


def repair(name: str, st: Any) -> tuple[LoopState, list[str]]:
    """A sane copy of one loop's entry and the fields that were not."""
    whole = isinstance(st, dict)
    source: dict[str, Any] = st if whole else {}
    bad: list[str] = [] if whole else ["the entry itself"]
    clean: LoopState = {}  # type: ignore[typeddict-item]
    for key, field in SCHEMA.items():
        value = field.rule(source.get(key, field.repaired))
        if whole and (value is check.INVALID or key not in source and key not in LATE_KEYS):
            bad.append(key)
        clean[key] = field.repaired if value is check.INVALID else value  # type: ignore[literal-required]
    if bad:
        fields = ", ".join(bad[:5]) + (" ..." if len(bad) > 5 else "")
        if clean["status"] not in TERMINAL:
            clean["status"], clean["reason"] = PAUSED, "error"
        clean["note"] = (f"state.json had bad values for {fields}; they were reset: check "
                         f"the loop, then `loopctl resume {name}`")[:2000]
    return clean, bad


def repair_all(loops: dict[Any, Any]) -> tuple[dict[str, LoopState], dict[str, list[str]]]:
    """Every entry checked; entries under names `start` would refuse are dropped."""
    clean, problems = {}, {}
    for name, st in loops.items():
        if not is_loop_name(name):
            problems[str(name)[:80]] = ["a name that is not a loop name (entry dropped)"]
            continue
        clean[name], bad = repair(name, st)
        if bad:
            problems[name] = bad
    return clean, problems
