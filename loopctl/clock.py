"""The one place that reads the wall clock.

Everything else takes `now` as an argument. `LOOPCTL_CLOCK_OFFSET` (seconds,
may be negative) shifts this process's idea of now; the fault tests use it to
jump the clock without touching the machine's time.
"""

from __future__ import annotations

import os
import time


def now() -> float:
    offset = os.environ.get("LOOPCTL_CLOCK_OFFSET")
    return time.time() + (float(offset) if offset else 0.0)
