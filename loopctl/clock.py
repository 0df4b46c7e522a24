"""The one place that reads the wall clock.

Everything else takes `now` as an argument. `LOOPCTL_CLOCK_OFFSET` (seconds,
may be negative) shifts this process's idea of now; the fault tests use it to
jump the clock without touching the machine's time.
"""

from __future__ import annotations

import time

from loopctl.settings import knob


def now() -> float:
    return time.time() + knob("LOOPCTL_CLOCK_OFFSET")
