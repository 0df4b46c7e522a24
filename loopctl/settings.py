"""Numbers read from the environment (`LOOPCTL_CLOCK_OFFSET`, ...).

They are input like any other: a value that is not a finite number in range
is an error naming the variable (exit 2), never a traceback and never a
silent fallback that would hide a typo in a unit file.
"""

from __future__ import annotations

import math
import os


def env_number(name: str, default: float, low: float, high: float,
               unit: str = "a number of seconds") -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not low <= value <= high:
        from loopctl.domain.errors import UsageError

        shown = raw if len(raw) <= 40 else raw[:37] + "..."
        raise UsageError(f"bad {name}={shown!r}: expected {unit} "
                         f"from {_plain(low)} to {_plain(high)}")
    return value


def _plain(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 1e6 else f"{value:g}"


# Every number loopctl reads from the environment, with its range: checked
# once at start-up so a typo fails every command the same way.
KNOBS = {
    # A century either way: enough for any test, and now() stays representable.
    "LOOPCTL_CLOCK_OFFSET": (0.0, -100 * 365 * 86400.0, 100 * 365 * 86400.0),
    "LOOPCTL_LEASE_TTL": (90.0, 0.1, 86400.0),
    "LOOPCTL_KILL_GRACE": (10.0, 0.0, 3600.0),
    "LOOPCTL_HOOK_TIMEOUT": (10.0, 0.1, 3600.0),
    # A notification's sender is SIGKILLed after this (integrations/notify.py).
    "LOOPCTL_NOTIFY_TIMEOUT": (30.0, 0.1, 3600.0),
    # Each `gh` call of PR feedback is killed after this (integrations/pr_feedback.py).
    "LOOPCTL_GH_TIMEOUT": (60.0, 0.1, 3600.0),
    # `loopctl serve` closes a request that has not arrived whole after this
    # (a slow client); each read waits at most a third of it (loopctl/serve/server.py).
    "LOOPCTL_SERVE_DEADLINE": (15.0, 0.1, 3600.0),
    # The highest Landlock ABI loopctl may use: 0 acts as a kernel without
    # Landlock (how `--sandbox on` refusing to run is tested), 1-5 as an
    # older kernel; unset, whatever the kernel offers.
    "LOOPCTL_SANDBOX_ABI": (99.0, 0.0, 99.0),
    # 0: the daemon does without inotify and notices edits by its one-second
    # stat() alone, as where inotify is missing (engine/filewatch.py).
    "LOOPCTL_FILE_WATCH": (1.0, 0.0, 1.0),
    # The team store (DESIGN §21): a supervisor renews its run's claim this
    # often, and a claim not renewed for LOOPCTL_STORE_STALE is stale; the
    # supervisor kills its agent one renewal before that (engine/team_fence).
    "LOOPCTL_STORE_RENEW": (10.0, 0.1, 3600.0),
    "LOOPCTL_STORE_STALE": (60.0, 0.5, 86400.0),
}
UNITS = {"LOOPCTL_SANDBOX_ABI": "a Landlock ABI version", "LOOPCTL_FILE_WATCH": "0 or 1"}


def knob(name: str) -> float:
    default, low, high = KNOBS[name]
    return env_number(name, default, low, high, UNITS.get(name, "a number of seconds"))


def check_env() -> None:
    for name in KNOBS:
        knob(name)
