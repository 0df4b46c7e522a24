"""Process checks shared by the end-to-end tests of killing and cleanup."""

from __future__ import annotations

import signal
from pathlib import Path

import psutil
from faults.support import home_processes, signal_mask


def kill_leftovers(tmp_path: Path) -> None:
    """Kill what a test started (its LOOPCTL_HOME is under tmp_path): a
    failing test must not leave agents sleeping for minutes."""
    procs = home_processes(tmp_path)
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=5)


def ignores_term(pid: int) -> bool:
    """The process ignores SIGTERM (Linux: its bit in /proc/PID/status
    SigIgn); raises when it is gone, so a dead process proves nothing."""
    return bool(signal_mask(pid, "SigIgn") >> (signal.SIGTERM - 1) & 1)


def pids_in(pid_file: Path) -> list[int]:
    """Pids the fake agent's grandchildren wrote to $FAKE_AGENT_PIDS."""
    return [int(p) for p in pid_file.read_text().split()] if pid_file.exists() else []
