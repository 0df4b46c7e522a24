"""Instants as the text loopctl writes and reads (`2026-12-02T19:31:31Z`).

Apart from the schedule (which needs a definition's fields) so that a
module that only writes a time imports no loop rules.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone

UTC = timezone.utc

_DAYS: dict[int, str] = {}  # a day's date text: a listing's moments share few days
# "HH:MM" of each minute of the day met so far: not a table of all 1,440
# made up front (formatted, ~8M instructions; joined, ~0.9M), paid by every
# process that writes one time (each fired run, its driver).
_MINUTES: dict[int, str] = {}
_SECONDS = [tens + units for tens in "012345" for units in "0123456789"]


def iso(ts: float | None) -> str | None:
    """What `datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")`
    gives (the microseconds rounded half to even, as datetime does), at a
    fifth of its cost: `ls --json` of 10,000 loops writes 30,000 or more.
    The clock text comes from tables, not from formatting (three `:02d`
    fields were two thirds of the time)."""
    if ts is None:
        return None
    whole = math.floor(ts)
    if round((ts - whole) * 1e6) >= 1_000_000:
        whole += 1
    day, second = divmod(whole, 86400)
    date = _DAYS.get(day)
    if date is None:
        date = _DAYS[day] = datetime.fromtimestamp(day * 86400, UTC).strftime("%Y-%m-%d")
    minute, rest = divmod(second, 60)
    clock = _MINUTES.get(minute)
    if clock is None:
        clock = _MINUTES[minute] = _SECONDS[minute // 60] + ":" + _SECONDS[minute % 60]
    return date + "T" + clock + ":" + _SECONDS[rest] + "Z"


def parse_iso(text: str) -> float:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
