"""The one place that reads the wall clock.

Everything else takes `now` as an argument. `LOOPCTL_CLOCK_OFFSET` (seconds,
may be negative) shifts this process's idea of now; the fault tests use it to
jump the clock without touching the machine's time.
"""

from __future__ import annotations

import time

from loopctl.settings import env_number

# A century either way: enough for any test, and now() stays representable.
MAX_OFFSET = 100 * 365 * 86400.0


def now() -> float:
    return time.time() + env_number("LOOPCTL_CLOCK_OFFSET", 0.0, -MAX_OFFSET, MAX_OFFSET)
