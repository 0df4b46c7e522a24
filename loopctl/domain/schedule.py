"""When a loop fires next (DESIGN §3). Pure: every function takes `now`, and
the loop's zone (a tzinfo) where a cron expression is evaluated; which zone
that is (`--tz`, or the system's) is decided at the edge, `clock.zone_of`.

Times are POSIX seconds (UTC). Cron expressions are evaluated on local wall
time in the loop's zone and mapped to instants here, because the libraries'
own DST handling is what users of cron complain about: a wall time that occurs
twice fires once (the first time), one that does not exist fires once at the
transition.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, tzinfo

from loopctl.fast.lazy_re import lazy

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:  # annotations only: the schedule needs no definition rules
    import re
    from typing import Any

    from loopctl.domain.model import LoopDef

BACKOFF_CAP = 8
# Counting missed cron slots one by one is exact but unbounded (a year of
# `* * * * *` is 525,600 slots); past this many the rest is estimated.
MISSED_EXACT_LIMIT = 2000

# Which zone a loop's cron expression is read in; the drivers pass
# `clock.zone_of`, tests a fixed zone.
Zones = Callable[["LoopDef"], tzinfo]


def wall_to_instant(naive: datetime, tz: tzinfo) -> float:
    """Map a local wall time to the instant it names (first one if repeated;
    the transition itself if the wall time falls in a gap)."""
    first = naive.replace(tzinfo=tz, fold=0)
    instant = first.timestamp()
    if datetime.fromtimestamp(instant, tz).replace(tzinfo=None) == naive:
        return instant
    # In a gap: fold=1 gives an instant before the jump, fold=0 one after it.
    lo, hi = naive.replace(tzinfo=tz, fold=1).timestamp(), instant
    if lo > hi:
        lo, hi = hi, lo
    before = datetime.fromtimestamp(lo, tz).utcoffset()
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, tz).utcoffset() == before:
            lo = mid
        else:
            hi = mid
    return float(int(hi))


def day_or(expr: str) -> bool:
    """Whether a day matches when day-of-month *or* day-of-week does, as
    crontab(5) reads it in Vixie cron and cronie: only when both fields are
    restricted; a field starting with `*` (`*`, `*/2`) makes both must-match.
    So `0 0 */2 * 1` is odd days that are Mondays. (croniter's own default
    ORs any two fields other than a bare `*`.) Quartz's `?` reads as `*`."""
    fields = expr.split()
    if len(fields) != 5:
        return True  # an @daily-style alias: one of its day fields is `*`
    return not fields[2].startswith(("*", "?")) and not fields[4].startswith(("*", "?"))


def _single(match: re.Match[str]) -> str:
    lo, hi = match.group(1), match.group(2)
    same = lo.lower() == hi.lower() or (lo.isdigit() and hi.isdigit() and int(lo) == int(hi))
    return lo if same else match.group(0)


def plain_ranges(expr: str) -> str:
    """`expr` with each one-value range (`5-5`, `mon-MON/2`) as that value:
    croniter expands those to the whole field (`0 0 5-5 * *` every day),
    cron to the one value."""
    return " ".join(",".join(_RANGE.sub(_single, part) for part in field.split(","))
                    for field in expr.split())


_RANGE = lazy(r"^([0-9a-zA-Z]+)-([0-9a-zA-Z]+)(?:/[0-9]+)?$")


# A croniter per expression (and kind of start), never walked itself.
_PARSED: dict[tuple[str, bool, Any], Any] = {}


def cron_iter(expr: str, start: datetime):  # type: ignore[no-untyped-def]
    """croniter over `expr` from `start`, reading the day fields as cron does.
    Building one parses the expression (~30x a step): each is a copy of the
    expression's first, moved to `start` (its own position; the parsed
    fields are only read, so threads may share them)."""
    import copy

    key = (plain_ranges(expr), day_or(expr), start.tzinfo)
    parsed = _PARSED.get(key)
    if parsed is None:
        from croniter import croniter

        if len(_PARSED) >= 1024:  # a daemon's expressions fit; an odd many re-parse
            _PARSED.clear()
        parsed = _PARSED[key] = croniter(key[0], start, day_or=key[1])
    walker = copy.copy(parsed)
    walker.set_current(start, force=True)
    return walker


_DST_REACH = 3 * 3600.0


def wall_slots(expr: str, tz: tzinfo, after: float):  # type: ignore[no-untyped-def]
    """Cron slots as instants, starting a little before `after` (a repeated
    hour can put the current wall time behind an instant we must consider).
    Where the zone's offset is the same 3 hours either side, nothing is
    repeated: the walk starts at `after` (a minutely schedule no longer
    steps through 180 slots to reach it; croniter's steps are the cost)."""
    here = datetime.fromtimestamp(after, tz)
    offset = here.utcoffset()
    steady = datetime.fromtimestamp(after - _DST_REACH, tz).utcoffset() == offset \
        == datetime.fromtimestamp(after + _DST_REACH, tz).utcoffset()
    start = here.replace(tzinfo=None) - timedelta(seconds=1 if steady else _DST_REACH)
    it = cron_iter(expr, start)
    while True:
        yield wall_to_instant(it.get_next(datetime), tz)


def cron_next(expr: str, zone: tzinfo, after: float) -> float:
    """The first cron slot strictly after `after`."""
    for instant in wall_slots(expr, zone, after):
        if instant > after:
            return instant
    raise AssertionError("unreachable")


def cron_count(expr: str, zone: tzinfo, start: float, end: float) -> int:
    """How many distinct slots lie in (start, end]; bounded work."""
    count, last, first = 0, start, None
    for instant in wall_slots(expr, zone, start):
        if instant <= last:
            continue
        if instant > end:
            return count
        first = instant if first is None else first
        count, last = count + 1, instant
        if count >= MISSED_EXACT_LIMIT:
            period = (last - first) / (count - 1)
            return count + int((end - last) // period)
    return count


def backoff_factor(failures: int) -> int:
    """x2 per consecutive failure, capped at x8."""
    return min(2 ** max(failures, 0), BACKOFF_CAP)


def clamp_delay(loop: LoopDef, requested: float) -> tuple[float, bool]:
    """An agent's requested delay clamped to [min_delay, max_delay]."""
    clamped = min(max(requested, loop.min_delay), loop.max_delay)
    return clamped, clamped != requested


def first_fire(loop: LoopDef, created: float, *, zone: tzinfo) -> float | None:
    """Due time of a new loop: `--every` at once, cron at its first slot, an
    `--on-demand` loop never (a trigger arms it)."""
    if loop.on_demand:
        return None
    start = created + (loop.after or 0)
    if loop.cron:
        return cron_next(loop.cron, zone, start if loop.after else created)
    return start


def next_fire(
    loop: LoopDef,
    *,
    zone: tzinfo,
    now: float,
    last_end: float | None,
    created: float | None,
    failures: int = 0,
    requested_delay: float | None = None,
) -> float | None:
    """When `loop` is next due, given when its last run ended (or never).

    `--every` waits from the end of the last run, backing off after failures;
    auto pace uses the delay the agent asked for (already clamped) or the
    keepalive; cron takes the next slot after the later of the run's end and
    `now`, so missed slots never pile up.
    """
    if loop.on_demand:
        return None
    if last_end is None:
        # `created` is unknown only in an entry repaired and not yet reconciled.
        return first_fire(loop, now if created is None else created, zone=zone)
    if loop.cron:
        return cron_next(loop.cron, zone, max(last_end, now))
    if loop.auto:
        delay = requested_delay if requested_delay is not None else loop.keepalive
        return last_end + delay * backoff_factor(failures)
    return last_end + (loop.every or 0) * backoff_factor(failures)


def missed_count(loop: LoopDef, due: float, now: float, *, zone: tzinfo) -> int:
    """Occurrences that came due in (due, now]: collapsed into one catch-up."""
    if now <= due or loop.on_demand:
        return 0
    if loop.cron:
        return cron_count(loop.cron, zone, due, now)
    if loop.auto:
        return 0  # self-paced loops have no occurrences of their own
    return int((now - due) // (loop.every or 1))


TRIGGER_SLACK_S = 5.0
TICK_EARLY_S = 15.0  # entry.nothing_due looks this far ahead too


def tick_early(loop: LoopDef) -> float:
    """How early a minute tick (cron's `loopctl tick`) fires an `--every` of
    whole minutes: its due time (the run's end plus the interval) lands a
    second or two past the tick that would serve it, and the next comes a
    minute later (`--every 1m` ran 9 times in 11 minutes). So a due time up
    to 15 s ahead counts as due at a tick; the daemon fires on time."""
    if loop.every and not loop.auto and not loop.cron and loop.every % 60 == 0:
        return TICK_EARLY_S
    return 0.0


def latest_plausible_due(loop: LoopDef, now: float, failures: int | None = None,
                         ran: bool = False, *, zone: tzinfo) -> float:
    """No due time computed with a correct clock lies beyond this; a later one
    means the wall clock was set back, and the loop re-arms from `now`.
    Without `failures` it allows the largest backoff. A trigger's due time
    is the moment it was accepted, which may come a little after the `now`
    a driver took before waiting for the store lock: that is no clock
    going back (TRIGGER_SLACK_S), or the trigger would be re-armed away."""
    if loop.cron:
        return cron_next(loop.cron, zone, now + (0 if ran else loop.after or 0))
    factor = BACKOFF_CAP if failures is None else backoff_factor(failures)
    if loop.auto:
        longest = max(loop.max_delay, loop.keepalive) * factor
    else:
        longest = (loop.every or 0) * factor
    return now + max(longest, 0 if ran else loop.after or 0, TRIGGER_SLACK_S)
