"""Schedules in the forms other schedulers read (DESIGN §9): a cron line from
`--every`, a systemd `OnCalendar=` from cron, and GitHub's UTC-only cron from
a cron in a local zone. Pure: no clock except the zone rules themselves.

`--every` has no exact cron form (it waits from the end of a run); it becomes
the wall-clock cron schedule of the same step with a warning, and is refused
where no faithful conversion exists (under a minute, self-paced loops, a step
cron cannot say evenly unless `--allow-drift`).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from loopctl.domain.durations import format_duration
from loopctl.domain.errors import UsageError
from loopctl.domain.model import LoopDef
from loopctl.domain.schedule import plain_ranges
from loopctl.fast.data_class import record
from loopctl.integrations.export.cron_forms import (
    MACROS,
    CronForm,
    check_dst,
    cron_line,
    parse_form,
)


def _nearest(value: int, choices: list[int]) -> int:
    return min(choices, key=lambda c: (abs(c - value), c))


def every_to_cron(seconds: int, warnings: list[str], allow_drift: bool = False) -> str:
    """The cron schedule closest to `--every`. It always fires on wall-clock
    slots (a warning says so); one that is not the interval itself (a step
    that does not divide an hour or a day, days that restart each month) is
    refused unless `allow_drift`, then warned."""
    name = format_duration(seconds)
    warnings.append(f"--every {name} waits from the end of each run; the export fires on "
                    "wall-clock slots instead")
    if seconds < 60:
        raise UsageError(f"cannot export --every {name}: cron fires at most once a minute")
    drift: list[str] = []
    cron = _every_cron(seconds, name, drift)
    if drift and not allow_drift:
        raise UsageError(f"cannot export --every {name} as cron evenly: {drift[0]}; pass "
                         "--allow-drift to accept those wall-clock slots, or export --to "
                         "systemd, which keeps the interval")
    warnings.extend(drift)
    return cron


def _every_cron(seconds: int, name: str, drift: list[str]) -> str:
    if seconds == 604800:
        return "0 0 * * 0"
    if seconds % 86400 == 0:
        days = seconds // 86400
        if days > 1:
            drift.append(f"--every {name} became every {days} days of the month "
                         "(the count restarts each month)")
        return "0 0 * * *" if days == 1 else f"0 0 */{days} * *"
    if seconds % 3600 == 0 and seconds < 86400:
        hours = seconds // 3600
        exact = _nearest(hours, [1, 2, 3, 4, 6, 8, 12])
        if exact != hours:
            drift.append(f"--every {name} became every {exact}h (cron steps must divide "
                         "a day)")
        return "0 * * * *" if exact == 1 else f"0 */{exact} * * *"
    minutes = max(round(seconds / 60), 1)
    if minutes >= 60:
        hours = _nearest(round(minutes / 60), [1, 2, 3, 4, 6, 8, 12, 24])
        drift.append(f"--every {name} became every {hours}h")
        return "0 0 * * *" if hours == 24 else "0 * * * *" if hours == 1 \
            else f"0 */{hours} * * *"
    exact = _nearest(minutes, [1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30])
    if exact * 60 != seconds:
        drift.append(f"--every {name} became every {exact}m (cron steps must divide an "
                     "hour)")
    return "* * * * *" if exact == 1 else f"*/{exact} * * * *"


def loop_cron(loop: LoopDef, warnings: list[str], allow_drift: bool = False) -> str:
    """The loop's schedule as five cron fields in its own zone (a macro
    expanded; `--every` as the wall-clock cron closest to it)."""
    if loop.auto:
        raise UsageError(f"cannot export {loop.name!r}: a self-paced (--every auto) loop has "
                         "no schedule a scheduler could follow")
    if loop.cron:
        return MACROS.get(loop.cron.lower(), loop.cron)
    return every_to_cron(loop.every or 0, warnings, allow_drift)


def target_cron(loop: LoopDef, target: str, warnings: list[str],
                allow_drift: bool = False) -> CronForm:
    """The loop's schedule, refused where `target` cannot say it (DESIGN §3)."""
    return parse_form(loop_cron(loop, warnings, allow_drift), target)


# -- GitHub: cron in UTC only ------------------------------------------------------------


@record(frozen=True)
class UtcSchedule:
    """GitHub cron lines for a local schedule, one per UTC offset the zone
    uses. With more than one, a guard step runs only the line made for the
    offset in force (`offsets[cron]` is that offset, like `+0100`)."""

    crons: tuple[str, ...]
    offsets: dict[str, str]

    @property
    def needs_guard(self) -> bool:
        return len(self.crons) > 1


def zone_offsets(tz: str, year: int) -> list[timedelta]:
    """The UTC offsets a zone uses in a year (two with DST, else one)."""
    from zoneinfo import ZoneInfo

    zone = ZoneInfo(tz)
    seen: list[timedelta] = []
    for month in range(1, 13):
        offset = datetime(year, month, 15, 12, tzinfo=zone).utcoffset() or timedelta(0)
        if offset not in seen:
            seen.append(offset)
    return seen


def offset_text(offset: timedelta) -> str:
    """`+0100` / `-0330`, as `date +%z` prints it."""
    minutes = int(offset.total_seconds() // 60)
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}{abs(minutes) % 60:02d}"


def _expand(expr: str) -> tuple[list[int], list[int]]:
    from croniter import croniter

    fields, _ = croniter.expand(plain_ranges(expr))
    minutes = list(range(60)) if "*" in fields[0] else [int(m) for m in fields[0]]
    hours = list(range(24)) if "*" in fields[1] else [int(h) for h in fields[1]]
    return minutes, hours


def _shift(expr: str, offset: timedelta) -> str:
    """`expr` (local wall time at `offset`) as a UTC cron line."""
    minute, hour, dom, month, dow = expr.split()
    shift = int(offset.total_seconds() // 60)
    if shift == 0:
        return expr
    minutes, hours = _expand(expr)
    local = sorted({h * 60 + m for h in hours for m in minutes})
    utc = [t - shift for t in local]
    days_move = any(t < 0 or t >= 1440 for t in utc)
    if days_move and not (dom == month == dow == "*"):
        raise UsageError(
            f"cannot export cron {expr!r} --to github (GitHub reads cron in UTC): at this "
            "offset its times cross midnight, which moves the day fields; give the loop a "
            "UTC schedule (--tz UTC) or export to systemd or k8s, which keep the zone")
    utc = sorted({t % 1440 for t in utc})
    new_minutes = sorted({t % 60 for t in utc})
    new_hours = sorted({t // 60 for t in utc})
    if len(new_minutes) * len(new_hours) != len(utc):
        raise UsageError(f"cannot export cron {expr!r} --to github (GitHub reads cron in "
                         "UTC): its times do not form a cron grid in UTC; give the loop a UTC "
                         "schedule (--tz UTC) or export to systemd or k8s, which keep the zone")
    minute_field = minute if shift % 60 == 0 else ",".join(map(str, new_minutes))
    hour_field = "*" if hour == "*" and shift % 60 == 0 and len(new_hours) == 24 \
        else ",".join(map(str, new_hours))
    return f"{minute_field} {hour_field} {dom} {month} {dow}"


def github_schedule(expr: str, tz: str | None, year: int | None = None) -> UtcSchedule:
    """The UTC cron lines GitHub needs for `expr` evaluated in `tz`."""
    year = year or datetime.now(timezone.utc).year
    if not tz or tz == "UTC":
        return UtcSchedule((expr,), {})
    offsets = zone_offsets(tz, year)
    crons: list[str] = []
    by_cron: dict[str, str] = {}
    for offset in offsets:
        line = _shift(expr, offset)
        if line not in crons:
            crons.append(line)
        by_cron[line] = offset_text(offset)
    if len(crons) == 1:
        return UtcSchedule(tuple(crons), {})
    return UtcSchedule(tuple(crons), by_cron)


def longest_gap(expr: str, samples: int = 60) -> float:
    """The longest wait between fires of `expr` over its next `samples` fires."""
    from loopctl.domain.schedule import cron_iter

    it = cron_iter(expr, datetime(2026, 1, 1, tzinfo=timezone.utc))
    times = [it.get_next(float) for _ in range(samples)]
    return max(b - a for a, b in zip(times, times[1:], strict=False))


def shortest_gap_minutes(expr: str) -> int:
    """The shortest wait, in minutes, between two fires of `expr` on one day
    (or across midnight), which GitHub and actionlint hold to 5 minutes."""
    minutes, hours = _expand(expr)
    times = sorted(h * 60 + m for h in hours for m in minutes)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    return min([*gaps, times[0] + 1440 - times[-1]])


def github_lines(form: CronForm, tz: str | None, dst: bool = True,
                 year: int | None = None) -> UtcSchedule:
    """A local schedule as GitHub's UTC lines, refused where GitHub would fire
    other instants: day fields it may combine otherwise, a slot in an hour
    the clocks change (the guard keeps one line per offset, so it would fire
    twice in the fall-back hour and never in the gap), fires closer than 5
    minutes (GitHub's floor, which actionlint enforces)."""
    line = cron_line(form, "github")
    if dst:
        check_dst(form, tz, "github", repeated=True, year=year)
    utc = github_schedule(line, tz, year)
    gap = min(shortest_gap_minutes(c) for c in utc.crons)
    if gap < 5:
        raise UsageError(f"cannot export cron {form.expr!r} --to github: it fires {gap} "
                         "minute(s) apart, and GitHub runs a schedule at most every 5 minutes; "
                         "export --to systemd, k8s or crontab, or give it a schedule 5 minutes "
                         "apart")
    return utc
