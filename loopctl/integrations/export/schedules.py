"""Schedules in the forms other schedulers read (DESIGN §9): a cron line from
`--every`, a systemd `OnCalendar=` from cron, and GitHub's UTC-only cron from
a cron in a local zone. Pure: no clock except the zone rules themselves.

`--every` has no exact cron form (it waits from the end of a run); it becomes
the nearest wall-clock cron schedule with a warning, and is refused where no
faithful conversion exists (under a minute, self-paced loops).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from loopctl.domain.data_class import record
from loopctl.domain.durations import format_duration
from loopctl.domain.errors import UsageError
from loopctl.domain.model import LoopDef

DOW_NAMES = ("Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat")
MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
          "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
          "@hourly": "0 * * * *"}


def _nearest(value: int, choices: list[int]) -> int:
    return min(choices, key=lambda c: (abs(c - value), c))


def every_to_cron(seconds: int, warnings: list[str]) -> str:
    """The cron schedule closest to `--every`; warns when it is not exact."""
    name = format_duration(seconds)
    warnings.append(f"--every {name} waits from the end of each run; the export fires on "
                    "wall-clock slots instead")
    if seconds < 60:
        raise UsageError(f"cannot export --every {name}: cron fires at most once a minute")
    if seconds == 604800:
        return "0 0 * * 0"
    if seconds % 86400 == 0:
        days = seconds // 86400
        if days > 1:
            warnings.append(f"--every {name} became every {days} days of the month "
                            "(the count restarts each month)")
        return "0 0 * * *" if days == 1 else f"0 0 */{days} * *"
    if seconds % 3600 == 0 and seconds < 86400:
        hours = seconds // 3600
        exact = _nearest(hours, [1, 2, 3, 4, 6, 8, 12])
        if exact != hours:
            warnings.append(f"--every {name} became every {exact}h (cron steps must divide "
                            "a day)")
        return "0 * * * *" if exact == 1 else f"0 */{exact} * * *"
    minutes = max(round(seconds / 60), 1)
    if minutes >= 60:
        hours = _nearest(round(minutes / 60), [1, 2, 3, 4, 6, 8, 12, 24])
        warnings.append(f"--every {name} became every {hours}h")
        return "0 0 * * *" if hours == 24 else "0 * * * *" if hours == 1 \
            else f"0 */{hours} * * *"
    exact = _nearest(minutes, [1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30])
    if exact * 60 != seconds:
        warnings.append(f"--every {name} became every {exact}m (cron steps must divide an "
                        "hour)")
    return "* * * * *" if exact == 1 else f"*/{exact} * * * *"


def loop_cron(loop: LoopDef, warnings: list[str]) -> str:
    if loop.auto:
        raise UsageError(f"cannot export {loop.name!r}: a self-paced (--every auto) loop has "
                         "no schedule a scheduler could follow")
    if loop.cron:
        return MACROS.get(loop.cron, loop.cron)
    return every_to_cron(loop.every or 0, warnings)


# -- systemd ----------------------------------------------------------------------------


def _calendar_field(text: str, width: int, names: tuple[str, ...] | None = None) -> str:
    """One cron field in systemd's calendar syntax (lists, ranges, steps)."""
    if text == "*":
        return "*"

    def value(v: str) -> str:
        if names is not None:
            return names[int(v) % 7]
        return v.zfill(width)

    parts = []
    for part in text.split(","):
        base, _, step = part.partition("/")
        if base == "*":
            parts.append(f"{value('0')}/{step}")
            continue
        if "-" in base:
            lo, hi = base.split("-", 1)
            suffix = f"/{step}" if step and names is None else ""
            parts.append(f"{value(lo)}..{value(hi)}{suffix}")
        else:
            parts.append(value(base) + (f"/{step}" if step else ""))
    return ",".join(parts)


def cron_to_calendar(expr: str, tz: str | None) -> str:
    """A five-field cron expression as a systemd OnCalendar= value, in the
    loop's zone (systemd applies the zone's DST rules itself)."""
    expr = MACROS.get(expr, expr)
    minute, hour, dom, month, dow = expr.split()
    if "/" in dow or (dom != "*" and dow != "*"):
        raise UsageError(f"cannot express cron {expr!r} as a systemd calendar: cron ORs "
                         "day-of-month and day-of-week")
    when = f"*-{_calendar_field(month, 2)}-{_calendar_field(dom, 2)} " \
           f"{_calendar_field(hour, 2)}:{_calendar_field(minute, 2)}:00"
    if dow != "*":
        when = f"{_calendar_field(dow, 1, DOW_NAMES)} {when}"
    return when + (f" {tz}" if tz else "")


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

    fields, _ = croniter.expand(expr)
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
            f"cannot convert cron {expr!r} to GitHub's UTC schedule: at this offset "
            "its times cross midnight, which moves the day fields; give the loop a UTC "
            "schedule (--tz UTC) or export to systemd or k8s, which keep the zone")
    utc = sorted({t % 1440 for t in utc})
    new_minutes = sorted({t % 60 for t in utc})
    new_hours = sorted({t // 60 for t in utc})
    if len(new_minutes) * len(new_hours) != len(utc):
        raise UsageError(f"cannot convert cron {expr!r} to GitHub's UTC schedule: its "
                         "times do not form a cron grid in UTC")
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
