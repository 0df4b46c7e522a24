"""Slots: what a fire serves (DESIGN §20). Pure: `now` and the zone come in.

A schedule slot is an instant of the loop's schedule (UTC). The loop's state
keeps the newest schedule slot it served (`high`) and the last few it served
or skipped with the run id or the reason (`recent`, at most KEEP): a slot at
or before `high` is never served again, by any driver, whatever the clock
did since. Trigger slots (`trigger:WHEN`) and manual ones (`manual:RUN_ID`)
are unique by construction and are not remembered.
"""

from __future__ import annotations

from datetime import tzinfo

from loopctl.domain.model import LoopDef
from loopctl.domain.schedule import cron_next, next_fire
from loopctl.domain.skipped import REASONS, SkippedSlot
from loopctl.domain.timestamps import iso

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any
    from typing import TypedDict as _Shape

    from loopctl.domain.state import LoopState
else:
    _Shape = object


# The entry's parts this module keeps, typed for mypy and plain mappings at
# run time (state.json's bytes, and the listing's reader of entries as
# written, stay as they are), as domain/tally's Tally.

class Slots(_Shape):
    """state.json's `slots`: the newest schedule slot served, and the last
    KEEP served or skipped as `[instant, how]` (`run ID`, `skipped: REASON`)."""

    high: float
    recent: list[list[Any]]


class LastSkip(_Shape):
    reason: str  # REASONS
    at: float


class Skips(_Shape):
    """state.json's `skips`: due slots that did not run, by reason, and the last."""

    counts: dict[str, int]
    last: LastSkip | None

KEEP = 4
# Looking back for a cron instant at or before now: widening windows, so
# a minutely schedule costs one short scan and a yearly one a few more.
_LOOK_BACK = (120.0, 3600.0, 86400.0, 32 * 86400.0, 367 * 86400.0, 5 * 367 * 86400.0)


def label(instant: float) -> str:
    return f"schedule:{iso(instant)}"


def cron_latest(expr: str, zone: tzinfo, now: float) -> float | None:
    """The schedule's latest instant at or before `now` (None: none in 5 years)."""
    from loopctl.domain.schedule import wall_slots

    for back in _LOOK_BACK:
        # One walk (one croniter, the costly part) rather than a cron_next
        # per instant: its instants never decrease (wall_to_instant maps a
        # gap's times to the transition, a repeated hour to its first pass).
        found, since = None, now - back
        for at in wall_slots(expr, zone, since):
            if at > now:
                break
            if at > since:
                found = at
        if found is not None:
            return found
    return None


def latest(loop: LoopDef, created: float, now: float, zone: tzinfo,
           fresh: bool = False) -> float | None:
    """The slot `run --scheduled` serves at `now`: the latest cron instant at
    or before it, or for `--every` the start of the interval window holding
    it, counted from the loop's start. None: the loop has no such slots
    (auto pace, on demand) or none has come since it started. For a
    `fresh` loop (no slot served yet) a cron instant before its state was
    created counts: an exported loop's home is new at its first fire (a
    GitHub runner with no cache yet), and its scheduler fired it for that
    instant."""
    if loop.on_demand or loop.auto:
        return None
    if loop.cron:
        found = cron_latest(loop.cron, zone, now)
        return found if found is not None and (fresh or found >= created) else None
    every = float(loop.every or 0)
    if every <= 0 or now < created:
        return None
    return created + ((now - created) // every) * every


def for_scheduled(loop: LoopDef, st: LoopState, now: float, zone: tzinfo,
                  given: float | None = None
                  ) -> tuple[float | None, str | None, SkippedSlot | None]:
    """What `run --scheduled` decides about its slot: `given` (`--slot`,
    checked by the caller) or the latest at or before `now` (`latest`); why
    it may not fire (none has come yet; a run took it or it was skipped;
    older than the catch-up window, which is recorded `outside_window` as
    every driver records it, the third value). The caller says a loop's run
    in flight or rate limit (exit 75) before a taken slot (exit 0)."""
    instant = given if given is not None else \
        latest(loop, st.created, now, zone, fresh=not st.slots)
    if instant is None:
        return None, None if loop.auto or loop.on_demand else \
            f"not firing {loop.name}: no slot of its schedule has come yet", None
    taken = served(st, instant, width(loop))
    if taken is not None:
        return instant, refusal(instant, taken), None
    window = loop.catch_up_window
    if window is None or now - instant <= window:
        return instant, None, None
    from loopctl.domain.durations import format_duration

    remember(st, instant, "skipped: outside_window")
    return instant, (f"not firing {loop.name}: slot {iso(instant)} is outside its catch-up "
                     f"window ({format_duration(window)})"), \
        skip(st, "outside_window", instant, now)


def width(loop: LoopDef) -> float:
    """How far a slot of `run --scheduled` reaches: an `--every` loop's
    window (a driver's fire in it took it), a cron instant alone."""
    return 0.0 if loop.cron else float(loop.every or 0)


def is_instant(loop: LoopDef, created: float, instant: float, zone: tzinfo) -> bool:
    """`instant` is one of the schedule's (what `--slot` must name)."""
    if loop.on_demand or loop.auto:
        return False
    if loop.cron:
        return cron_next(loop.cron, zone, instant - 0.5) == instant
    every = float(loop.every or 0)
    return every > 0 and instant >= created and (instant - created) % every == 0


def served(st: LoopState, instant: float, width: float = 0.0) -> str | None:
    """Who took the schedule slot `instant` (`run ID`, `skipped: REASON`);
    with `width`, any slot in [instant, instant + width) (an `--every`
    loop's window). None: it is free. Only remembered slots count: one
    older than the last KEEP was never the newest a clock step could reach
    again without a driver seeing a later one first."""
    slots = st.slots
    if not slots:
        return None
    for at, how in slots["recent"]:
        if at == instant or instant <= at < instant + width:
            return str(how)
    return None


def remember(st: LoopState, instant: float, how: str) -> None:
    """Mark the schedule slot `instant` taken (`run ID`) or skipped
    (`skipped: REASON`); bounded, newest last."""
    slots = st.slots or {"high": instant, "recent": []}
    recent = [pair for pair in slots["recent"] if pair[0] != instant]
    recent.append([instant, how])
    recent.sort(key=lambda pair: pair[0])
    st.slots = {"high": max(slots["high"], instant), "recent": recent[-KEEP:]}


def skip(st: LoopState, reason: str, instant: float | None, now: float, *,
         count: int | None = None, run_id: str | None = None, by: str | None = None,
         kind: str | None = None, machine: str | None = None) -> SkippedSlot:
    """Count a due slot that did not run in the loop's state (for `status`
    and /metrics) and return its compact record (runs/<loop>/skipped.jsonl)."""
    if reason == "held" and instant is not None:  # `resumed` counts from it, not it
        remember(st, instant, "skipped: held")
    skips = st.skips or {"counts": {}, "last": None}
    counts = dict(skips["counts"])
    counts[reason] = counts.get(reason, 0) + 1
    st.skips = {"counts": counts, "last": {"reason": reason, "at": now}}
    return SkippedSlot(label(instant) if instant is not None else None, reason, iso(now),
                       count=count, run_id=run_id, by=by, kind=kind, machine=machine)


def check_skips(value: Any) -> Any:
    """state.json's `skips` as `skip` writes it, else INVALID."""
    from loopctl.domain import untrusted as check

    if value is None:
        return None
    counts, last = (value.get("counts"), value.get("last")) if isinstance(value, dict) \
        else (None, None)
    if not isinstance(counts, dict) or any(k not in REASONS or check.count(n) is None
                                           for k, n in counts.items()):
        return check.INVALID
    if last is not None and (not isinstance(last, dict) or last.get("reason") not in REASONS
                             or check.moment(last.get("at")) is None):
        return check.INVALID
    return {"counts": dict(counts),
            "last": None if last is None else {"reason": last["reason"],
                                               "at": float(last["at"])}}


def walk_due(loop: LoopDef, due: float, now: float, zone: tzinfo) -> tuple[int, float | None]:
    """A due loop's occurrences missed in (due, now] (schedule.missed_count)
    and, for cron, its latest instant at or before now (cron_latest), from
    one walk of the schedule: a due pass steps it twice, not four times."""
    from loopctl.domain.schedule import MISSED_EXACT_LIMIT, missed_count, wall_slots

    if not loop.cron:
        return missed_count(loop, due, now, zone=zone), None
    if now <= due:
        return 0, cron_latest(loop.cron, zone, now)
    count, last = 0, None
    for at in wall_slots(loop.cron, zone, due - 0.5):
        if at > now:
            return count, last if last is not None else cron_latest(loop.cron, zone, now)
        if at >= due - 0.5:
            count, last = count + (at > due and at != last), at
        if count >= MISSED_EXACT_LIMIT:  # a long sleep: the bounded count
            break
    return missed_count(loop, due, now, zone=zone), cron_latest(loop.cron, zone, now)


def due_slot(loop: LoopDef, st: LoopState, due: float, now: float, zone: tzinfo,
             latest: float | None = None,
             missed: int = 0) -> tuple[float, str | None, SkippedSlot | None]:
    """The slot a due scheduled fire serves (a catch-up, the latest missed
    instant; a fire queued behind a run is due when it ended, off the
    schedule) and, when it may not fire, why: a run took it already, or it
    is older than the catch-up window (recorded `outside_window`, a 09:00
    report does not run at 18:00; the record counts the `missed` slots
    before it, as catch_up_none's does). Then the loop re-arms from now."""
    instant = due
    if loop.cron:  # `latest`: walk_due's
        instant = latest or cron_latest(loop.cron, zone, now) or due
    taken = served(st, instant)
    window = loop.catch_up_window
    entry = None
    if taken is not None:
        why = refusal(instant, taken)
    elif window is not None and now - instant > window:
        from loopctl.domain.durations import format_duration

        remember(st, instant, "skipped: outside_window")
        entry = skip(st, "outside_window", instant, now, count=missed + 1)
        why = (f"slot {iso(instant)} skipped: outside the catch-up window "
               f"({format_duration(window)} late at most)")
    else:
        return instant, None, None
    st.next_due = next_fire(loop, zone=zone, now=now, last_end=now, created=st.created,
                               failures=st.failures)
    st.note = why
    return instant, why, entry


def unskip(st: LoopState, entries: list[tuple[str, SkippedSlot]], name: str,
           instant: float | None) -> list[tuple[str, SkippedSlot]]:
    """`run --scheduled` serves `instant` after its pass found the loop's
    due slot late under `--catch-up none` (a scheduler that fires late, as
    GitHub's often does): that slot ran, so it leaves the skipped record
    (which keeps the others it counted) and the count."""
    if instant is None:
        return entries
    from loopctl.fast.data_class import replace

    kept = []
    for who, entry in entries:
        if who == name and entry.reason == "catch_up_none" and entry.slot == label(instant):
            if entry.count is not None and entry.count > 1:
                entry = replace(entry, slot=None, count=entry.count - 1)
            else:
                _uncount(st, "catch_up_none")
                continue
        kept.append((who, entry))
    return kept


def _uncount(st: LoopState, reason: str) -> None:
    skips = st.skips
    if not skips or not skips["counts"].get(reason):
        return
    counts = dict(skips["counts"])
    counts[reason] -= 1
    counts = {k: n for k, n in counts.items() if n}
    st.skips = {"counts": counts, "last": skips["last"]} if counts else None


def deferral(st: LoopState) -> float | None:
    """While a usage limit defers the loop (paused `rate_limited`), when its
    next slot came or comes due: where `resumed` starts counting."""
    from loopctl.domain.state import PAUSED

    return st.next_due if st.status == PAUSED and st.reason == "rate_limited" \
        else None


def resumed(loop: LoopDef, st: LoopState, since: float | None, now: float,
            zone: tzinfo) -> SkippedSlot | None:
    """A loop a usage limit deferred has just resumed: the cron slots that
    came due meanwhile, all but the latest (the resuming fire serves it, or
    records why not), are recorded `deferred` in one record, like the
    `missed` ones folded into a catch-up. None: none came due."""
    from loopctl.domain.schedule import missed_count
    from loopctl.domain.state import ACTIVE

    if since is None or not loop.cron or st.status != ACTIVE or since > now:
        return None
    # The slots in [since, now] not on record yet (a held one is), but the latest.
    first = cron_next(loop.cron, zone, since - 0.5) == since and served(st, since) is None
    count = missed_count(loop, since, now, zone=zone) + first - 1
    return skip(st, "deferred", None, now, count=count, by="usage_limit") if count else None


def refusal(instant: float, taken: str) -> str:
    """What a refused second fire says."""
    stamp = iso(instant)
    if taken.startswith("run "):
        return f"slot {stamp} already ran: {taken}"
    return f"slot {stamp} was {taken}"


def check_slots(value: Any) -> Any:
    """state.json's `slots` as written by `remember`, else None (the
    repair rule's INVALID is the caller's)."""
    from loopctl.domain import untrusted as check

    if value is None:
        return None
    if not isinstance(value, dict) or check.moment(value.get("high")) is None \
            or not isinstance(value.get("recent"), list) or len(value["recent"]) > KEEP:
        return check.INVALID
    for pair in value["recent"]:
        if not isinstance(pair, list) or len(pair) != 2 or check.moment(pair[0]) is None \
                or check.text(pair[1], 200) is None:
            return check.INVALID
    return {"high": float(value["high"]), "recent": [[float(a), b] for a, b in value["recent"]]}


# `catch_up_window` beside `catch_up: none` (DESIGN §20): the window is read
# by its row's kind (loop_settings.read); this is the rule between the two.
WINDOW_CONTRADICTION = ("'catch_up_window' with 'catch_up: none' is contradictory "
                        "(none catches up nothing); drop one of them")


K8S_JOB = "k8s-job:"
# A CronJob's Job is named `CRONJOB-<scheduled time in minutes since the
# epoch>` by its controller (cronjob_controllerv2.go, getJobName). A name
# of up to 12 digits is read, and only up to the last minute of year 9999:
# past it no clock or date can show the instant (12 nines once crashed).
_MINUTES_MAX = 12
_LAST_MINUTE = 253402300799 // 60  # 9999-12-31T23:59:00Z


def k8s_job_instant(given: str, cron_job: str) -> float:
    """The scheduled instant of a Kubernetes Job, from `--slot
    k8s-job:CRONJOB:JOBNAME` (the export passes its Job's name through the
    downward API: no RBAC needed to read it). CRONJOB must be the loop's
    own CronJob and JOBNAME the name its controller gives a scheduled Job;
    anything else (a Job created by hand, another CronJob's, a label the
    cluster did not set) is refused, never served as some other slot."""
    from loopctl.domain.errors import UsageError

    shown = given[:80]
    owner, sep, job = given[len(K8S_JOB):].partition(":")
    if not sep or owner != cron_job:
        raise UsageError(f"bad --slot {shown!r}: expected k8s-job:{cron_job}:JOBNAME "
                         f"(this loop's CronJob is {cron_job})")
    minutes = job[len(cron_job) + 1:] if job.startswith(cron_job + "-") else ""
    # ASCII digits only: str.isdigit admits '²', which int() refuses.
    if not 0 < len(minutes) <= _MINUTES_MAX or not minutes.isascii() \
            or not minutes.isdigit() or int(minutes) > _LAST_MINUTE:
        raise UsageError(f"bad --slot {shown!r}: {job[:60]!r} is not a Job its CronJob "
                         f"scheduled ({cron_job}-MINUTES, as the CronJob controller names "
                         "them)")
    return int(minutes) * 60.0
