"""How a run answers `stop --kill` and Ctrl-C: SIGTERM, SIGINT and SIGHUP
end the wait for the agent (or its gate or check) as `killed`; from the
commit on they are only noted (steps/handoff.py)."""

from __future__ import annotations

import signal

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_interrupted(signum: int, _frame: Any) -> None:
    raise Interrupted(signum)


def interruptible() -> None:
    """SIGTERM, SIGINT and SIGHUP end the wait (and the run) as `killed`."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _raise_interrupted)


def ignore_stop_signals() -> None:
    """From here on the work is finished, not abandoned: a second Ctrl-C must
    not leave the agent's tree behind or a half-made commit or push."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def kill_grace() -> float:
    from loopctl.settings import knob

    return knob("LOOPCTL_KILL_GRACE")
