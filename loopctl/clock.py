"""The one place that reads the wall clock, and the zone it is read in.

Everything else takes `now` (and a cron loop's zone) as an argument.
`LOOPCTL_CLOCK_OFFSET` (seconds, may be negative) shifts this process's idea
of now; the fault tests use it to jump the clock without touching the
machine's time.
"""

from __future__ import annotations

import os
import time

from loopctl.settings import knob

TYPE_CHECKING = False  # not typing's: the idle tick does not import typing
if TYPE_CHECKING:
    from datetime import tzinfo

    from loopctl.domain.model import LoopDef

# The idle tick's fast path imports this module: datetime and zoneinfo are
# imported only when a zone is asked for.
_SYSTEM_ZONES: dict[str, tzinfo] = {}


def now() -> float:
    return time.time() + knob("LOOPCTL_CLOCK_OFFSET")


def zone_of(loop: LoopDef) -> tzinfo:
    """The zone a loop's cron expression is read in: its `--tz`, or the
    system's (DESIGN §3). Only a cron expression is read in a zone, so
    other loops get UTC and no run of theirs reads the tz database."""
    if not loop.cron:
        from datetime import timezone

        return timezone.utc
    if loop.tz:
        from zoneinfo import ZoneInfo

        return ZoneInfo(loop.tz)  # cached by zoneinfo itself
    return system_zone(os.environ.get("TZ", ""))


def system_zone(tz_variable: str) -> tzinfo:
    """`TZ` (with or without glibc's leading colon), then /etc/localtime,
    then UTC. Kept per value of the variable, so a changed `TZ` is seen; the
    file is read once a process."""
    zone = _SYSTEM_ZONES.get(tz_variable)
    if zone is None:
        zone = _SYSTEM_ZONES[tz_variable] = _read_system_zone(tz_variable)
    return zone


def _read_system_zone(tz_variable: str) -> tzinfo:
    from datetime import timezone
    from zoneinfo import ZoneInfo

    name = tz_variable.lstrip(":")
    if name:
        try:
            return ZoneInfo(name)
        except Exception:
            pass
    try:
        with open("/etc/localtime", "rb") as handle:
            return ZoneInfo.from_file(handle, key="localtime")
    except (OSError, ValueError):
        return timezone.utc
