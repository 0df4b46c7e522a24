"""Process identity and trees: pid + create time, liveness, killing a tree.

A pid alone is not an identity (pids are reused), so every process loopctl
records is `{pid, ct}` with psutil's create time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any

CT_TOLERANCE = 0.05


def ref(pid: int | None = None) -> dict[str, Any]:
    import psutil

    pid = pid or os.getpid()
    return {"pid": pid, "ct": psutil.Process(pid).create_time()}


def alive(proc: dict[str, Any] | None) -> bool:
    """True when the recorded process still exists (same create time, not a zombie)."""
    if not proc:
        return False
    import psutil

    try:
        p = psutil.Process(proc["pid"])
        if abs(p.create_time() - proc["ct"]) > CT_TOLERANCE:
            return False
        return p.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied, KeyError, TypeError):
        return False


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux), so a grandchild that called
    setsid() and lost its parent is still found among our children."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_CHILD_SUBREAPER = 36
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def descendants() -> list[Any]:
    import psutil

    try:
        return list(psutil.Process().children(recursive=True))
    except psutil.Error:
        return []


def kill_tree(agent: subprocess.Popen[bytes] | None, grace: float) -> int:
    """SIGTERM the agent's group and every descendant of this process (found
    before signalling, so none escapes by leaving the group), wait up to
    `grace`, then SIGKILL what is left. Returns how many needed SIGKILL.

    The agent itself is waited for through its Popen, never by pid: reaping
    it behind Popen's back would lose its exit status."""
    import psutil

    procs = [p for p in descendants() if agent is None or p.pid != agent.pid]
    if agent is not None and agent.poll() is None:
        try:
            os.killpg(agent.pid, signal.SIGTERM)
        except OSError:
            agent.terminate()
    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    deadline = time.monotonic() + grace
    _, still = psutil.wait_procs(procs, timeout=grace)
    if agent is not None:
        try:
            agent.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            agent.kill()
            still.append(agent)  # type: ignore[arg-type]
    late = [p for p in descendants() if agent is None or p.pid != agent.pid]
    for p in still + [p for p in late if p not in still]:
        try:
            p.kill()
        except (psutil.Error, OSError):
            pass
    if agent is not None:
        agent.wait()
    psutil.wait_procs([p for p in late if p not in still], timeout=2)
    reap()
    return len(still)


def reap() -> None:
    """Collect exited adopted children so they do not linger as zombies."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
