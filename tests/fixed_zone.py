"""The zones pure tests pass where the drivers pass `clock.zone_of`: a loop's
`--tz`, or UTC standing in for the system zone, so that no test depends on
the machine's `TZ` or /etc/localtime."""

from __future__ import annotations

from datetime import timezone, tzinfo
from zoneinfo import ZoneInfo

from loopctl.domain.model import LoopDef

UTC = timezone.utc


def zone_of(loop: LoopDef) -> tzinfo:
    return ZoneInfo(loop.tz) if loop.tz else UTC
