"""A loop's runtime state as one typed record, `LoopState`, and its pure helpers.

One entry per loop in state.json, keyed by name (DESIGN §2); times are POSIX
seconds. The top level carries what the `tick` fast path needs to decide,
without loading YAML or taking a lock, that nothing is due: the signature of
the `loops.yaml` the state was reconciled against, the earliest time anything
needs attention (`wake_at`) and whether any run is in flight (`busy`).

The record has two ways in and one way out, at the storage edge:

- `LoopState.from_json(name, entry)`: an untrusted entry (a state.json
  loopctl did not write as it is, a team store's row), checked field by
  field by domain/state_rules (a bad value reset, the loop paused);
- `LoopState.from_written(entry)`: an entry loopctl wrote itself (its MAC
  checked by the store), its left-out fields filled in, not checked again;
- `to_json()`: the entry as state.json holds it (version 2: the fields at
  their common value left out), byte for byte what loopctl has always
  written (tests/domain/test_loop_state_bytes.py).

The fields live in the instance's `__dict__`, which is the entry's mapping
itself: a record is made from an unpacked entry in one assignment (10,000 of
them for a `tick` of a big home) and keeps the order its fields were set in,
which is the order state.json writes them in.
"""

from __future__ import annotations

from datetime import tzinfo

from loopctl.domain.errors import UsageError
from loopctl.domain.model import LoopDef
from loopctl.domain.names import is_loop_name
from loopctl.domain.schedule import first_fire
from loopctl.domain.state_rules import (
    ACTIVE,
    LATE_KEYS,
    OUTCOMES,
    PAUSED,
    REASONS,
    RECENT,
    SCHEMA,
    STATUSES,
    TERMINAL,
    Field,
    clean_entry,
    tracked_pr,
)
from loopctl.domain.timestamps import UTC, parse_iso
from loopctl.fast.data_class import record

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from loopctl.domain.run_parts import CheckRecord
    from loopctl.domain.slots import Skips, Slots
    from loopctl.domain.tally import Tally

__all__ = ["ACTIVE", "LATE_KEYS", "OUTCOMES", "PAUSED", "REASONS", "RECENT", "SCHEMA",
           "STATUSES", "TERMINAL", "Field", "LoopState", "RunResult", "Settled", "tracked_pr"]


class LoopState:
    """One loop's entry in state.json. SCHEMA (domain/state_rules) holds each
    field's rule, initial value and repair value: construction and repair
    share it. Transitions about this loop alone are its methods; those that
    need its definition and schedule are domain/lifecycle's and verbs'."""

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
    slots: Slots | None
    # Due slots that did not run, by reason, and the last (DESIGN §20).
    skips: Skips | None
    # Counters /metrics serves, bumped as each run settles (DESIGN §19);
    # rules in domain/tally. None: no run settled since it was added.
    tally: Tally | None

    def __init__(self, fields: dict[str, Any]) -> None:
        """The record over `fields`, every SCHEMA field (taken, not copied)."""
        self.__dict__ = fields

    @classmethod
    def fresh(cls, loop: LoopDef, now: float, *, zone: tzinfo) -> LoopState:
        """A new loop's entry: every field at its initial value (a copy of
        one made once, each list its own: `ls` of a hand-written file of
        10,000 loops makes 10,000 of these)."""
        if not _INITIAL:
            _INITIAL.update({key: field.initial for key, field in SCHEMA.items()})
            _LISTS.extend(key for key, value in _INITIAL.items() if isinstance(value, list))
        made = cls(dict(_INITIAL))
        for key in _LISTS:
            made.__dict__[key] = list(_INITIAL[key])
        made.created = parse_iso(loop.created_at) if loop.created_at else now
        made.deadline = made.created + loop.for_s
        made.schedule_key, made.next_due = loop.schedule_key, first_fire(loop, made.created,
                                                                          zone=zone)
        return made

    @classmethod
    def from_json(cls, name: str, entry: Any) -> tuple[LoopState, list[str]]:
        """An untrusted entry (unpacked), cleaned, and the fields that were not."""
        if isinstance(entry, LoopState):  # checked again (a test, a repair's result)
            entry = dict(entry.__dict__)
        clean, bad = clean_entry(name, entry)
        return cls(clean), bad

    @classmethod
    def from_written(cls, entry: dict[str, Any]) -> LoopState:
        """An entry loopctl wrote (packed): its left-out fields filled in."""
        made: LoopState = cls(unpack(entry))
        return made

    def to_json(self) -> dict[str, Any]:
        """The entry as written: the fields that differ from `common_values`,
        in value or in type (a `0` left out would be read back as `False`)."""
        common = common_values()
        return {k: v for k, v in self.__dict__.items()
                if k not in common or v != (c := common[k]) or type(v) is not type(c)}

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LoopState):
            return self.__dict__ == other.__dict__
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, as a dict is

    def __repr__(self) -> str:
        return f"LoopState({self.__dict__!r})"

    # -- transitions of this loop alone (DESIGN §4) ---------------------------

    def pause(self, now: float) -> str:
        """The user's `pause`: at once when idle, else when the run ends."""
        if self.status in TERMINAL:
            raise UsageError(f"the loop is {self.status}; only active loops can be paused")
        if self.run:
            self.after_run = "pause"
            return "pausing when the current run ends"
        self.status, self.reason = PAUSED, "user"
        return "paused"

    def stop(self, now: float) -> str:
        """The user's `stop`: at once when idle, else when the run ends."""
        if self.status in TERMINAL:
            raise UsageError(f"the loop is already {self.status}")
        if self.run:
            self.after_run = "stop"
            return "stopping when the current run ends"
        self.end("stopped", now)
        return "stopped"

    def apply_control(self, now: float) -> None:
        """`pause`/`stop` asked for during the run take effect now, and beat a
        `continue` the run reported."""
        control, self.after_run = self.after_run, None
        if self.status in TERMINAL:
            return
        if control == "stop":
            self.end("stopped", now)
        elif control == "pause":
            self.status, self.reason = PAUSED, "user"

    def end(self, status: str, now: float) -> None:
        """The loop ends (`completed`, `failed`, `stopped`): nothing more is due."""
        self.status, self.reason = status, None
        self.ended_at = now
        self.next_due = None

    def unclaim(self, why: str) -> None:
        """A claimed run that could not be launched: undone, its slot given
        back, and the loop paused (`error`) so that a loop that cannot run
        does not retry at every pass."""
        if self.run is not None:
            self.forget_slot(str(self.run["run_id"]))
        self.run = None
        self.iterations = max(self.iterations - 1, 0)
        self.status, self.reason, self.note = PAUSED, "error", why[:2000]
        self.next_due = None

    def forget_slot(self, run_id: str) -> None:
        """A claimed run that never launched gives its slot back (DESIGN §20)."""
        if not self.slots:
            return
        recent = [pair for pair in self.slots["recent"] if pair[1] != f"run {run_id}"]
        self.slots = {"high": max(at for at, _ in recent), "recent": recent} if recent else None


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
    check: CheckRecord | None = None  # the record's `check`, when it ran
    # The limit or refused login was read from free text only, not from the
    # CLI's own fields: it holds this loop alone, for at most an hour (§18).
    loop_only: bool = False
    tokens: int | None = None  # tokens the reader saw the run use, if any
    # The agent succeeded but its check did not (outcome `failed`, §16).
    check_failed: bool = False


@record
class Settled:
    """What settling a run (lifecycle.settle) adds to its record: a note,
    the delay a `continue --next` asked for (clamped), the cost charged
    when none was read."""

    note: str | None = None
    next_delay_s: float | None = None
    cost_usd: float | None = None  # set with cost_estimated
    cost_estimated: bool = False

    def add_note(self, note: str | None) -> None:
        if note:
            self.note = "; ".join(filter(None, (self.note, note)))

    def to_json(self) -> dict[str, Any]:
        """The record's fields besides the note, as they were always added:
        the delay, then the estimate."""
        shape: dict[str, Any] = {}
        if self.next_delay_s is not None:
            shape["next_delay_s"] = self.next_delay_s
        if self.cost_estimated:
            shape["cost_usd"], shape["cost_estimated"] = self.cost_usd, True
        return shape


def new_loop_state(loop: LoopDef, now: float, *, zone: tzinfo) -> LoopState:
    """A fresh entry (LoopState.fresh)."""
    return LoopState.fresh(loop, now, zone=zone)


_INITIAL: dict[str, Any] = {}
_LISTS: list[str] = []


# -- state.json's entries on disk (version 2) --------------------------------
#
# Most fields of most loops hold what every new loop starts with (no run, no
# failure, no note): written out, they were 400 of an idle loop's 530 bytes
# in state.json, which every `ls`, `status` and driver pass decodes. An entry
# on disk leaves out each field at that common value; reading puts it back,
# so in memory every entry has every field. Writing is LoopState.to_json.

# Fields a definition decides: never left out.
PER_LOOP = frozenset({"status", "created", "deadline", "schedule_key", "next_due"})
_COMMON: dict[str, object] = {}
_MUTABLE: list[str] = []  # the common values that are lists or mappings


def common_values() -> Mapping[str, object]:
    """What every new entry holds, whatever its loop (read-only: shared by
    every caller): derived from `LoopState.fresh`, so a field added there is
    left out with no edit here."""
    if not _COMMON:
        probe = LoopState.fresh(LoopDef(name="probe"), 0.0, zone=UTC)
        _COMMON.update({k: v for k, v in vars(probe).items() if k not in PER_LOOP})
        _MUTABLE.extend(k for k, v in _COMMON.items() if isinstance(v, (list, dict)))
    return _COMMON


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
    if st.status in TERMINAL:
        return None
    times = [st.deadline if st.deadline is not None else 0.0]
    due, resume = st.next_due, st.resume_at
    if st.status == ACTIVE and due is not None:
        times.append(due)
    if resume is not None:
        times.append(resume)
    return min(times)


def past_deadline(st: LoopState, now: float) -> bool:
    """The calendar deadline has passed (unknown until reconciled: not yet)."""
    deadline = st.deadline
    return deadline is not None and now >= deadline


def in_flight(state: dict[str, Any]) -> bool:
    """A run, or the orphaned agent of a lost one, is still going somewhere."""
    return any(st.run or st.orphan for st in state["loops"].values())


def summarize(state: dict[str, Any]) -> None:
    """Recompute the fast-path fields from the loop entries."""
    wakes = [w for st in state["loops"].values() if (w := wake_time(st)) is not None]
    state["wake_at"] = min(wakes) if wakes else None
    state["busy"] = in_flight(state)


def entries_of(state: dict[str, Any]) -> dict[str, LoopState]:
    """The state's loop entries, typed (the top level is still a plain
    mapping: `version`, `wake_at`, `busy`, `accounts`...)."""
    entries: dict[str, LoopState] = state["loops"]
    return entries


def fields_of(st: LoopState | dict[str, Any]) -> dict[str, object]:
    """An entry's fields as one mapping to read, whether a record or an
    entry as written (the listing's column readers take either)."""
    return st.__dict__ if isinstance(st, LoopState) else st


def display_status(st: LoopState | dict[str, Any] | None) -> str:
    """What `ls` shows of an entry, a record or an entry as written."""
    if st is None:
        return "invalid"
    fields = fields_of(st)
    if fields.get("run"):
        return "running"
    if fields.get("queued_at") is not None and fields["status"] == ACTIVE:
        return "queued"
    return str(fields["status"])


def repair(name: str, st: Any) -> tuple[LoopState, list[str]]:
    """A sane copy of one loop's entry and the fields that were not."""
    return LoopState.from_json(name, st)


def repair_all(loops: dict[Any, Any]) -> tuple[dict[str, LoopState], dict[str, list[str]]]:
    """Every entry checked; entries under names `start` would refuse are dropped."""
    clean, problems = {}, {}
    for name, st in loops.items():
        if not is_loop_name(name):
            problems[str(name)[:80]] = ["a name that is not a loop name (entry dropped)"]
            continue
        clean[name], bad = LoopState.from_json(name, st)
        if bad:
            problems[name] = bad
    return clean, problems
