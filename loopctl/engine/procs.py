"""Process trees: becoming a subreaper, finding descendants, killing a tree.

The identity of a process (`{pid, ct}`) and its liveness live in
storage.proc_identity, below the lease that records them; they are named
here too for the engine's callers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

from loopctl.storage.proc_identity import alive, is_ancestor, ref

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

__all__ = ["alive", "is_ancestor", "ref", "become_subreaper", "has_children",
           "descendants", "kill_tree", "reap"]


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


def has_children() -> bool:
    """Whether this process has any child left. With the subreaper flag every
    living descendant is a child or below one, so False means there is
    nothing to clean up, without psutil. WNOWAIT: nothing is reaped here (a
    Popen reaped behind its back would report exit status 0)."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def descendants() -> list[Any]:
    if not has_children():
        return []
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
    _, not_gone = psutil.wait_procs(procs, timeout=grace)
    still: list[Any] = list(not_gone)  # psutil.Process and the agent's Popen
    if agent is not None:
        try:
            agent.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            agent.kill()
            still.append(agent)
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
