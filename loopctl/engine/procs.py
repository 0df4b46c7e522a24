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
    pid = pid or os.getpid()
    seen = _proc_stat(pid)
    if seen is None or seen is GONE:
        import psutil

        return {"pid": pid, "ct": psutil.Process(pid).create_time()}
    return {"pid": pid, "ct": seen[1]}


def alive(proc: dict[str, Any] | None) -> bool:
    """True when the recorded process still exists (same create time, not a zombie)."""
    if not proc:
        return False
    try:
        seen = _proc_stat(proc["pid"])
        if seen is GONE:
            return False
        if seen is not None:
            return abs(seen[1] - proc["ct"]) <= CT_TOLERANCE and seen[0] != "Z"
    except (KeyError, TypeError, ValueError):
        return False
    import psutil

    try:
        p = psutil.Process(proc["pid"])
        if abs(p.create_time() - proc["ct"]) > CT_TOLERANCE:
            return False
        return p.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied, KeyError, TypeError):
        return False


GONE = ("gone", 0.0)
_BOOT_TIME: list[float] = []


def _proc_stat(pid: int) -> tuple[str, float] | None:
    """(state letter, create time) from Linux's /proc, computed as psutil
    computes it (boot time + start ticks / CLK_TCK); GONE when there is no
    such process; None where /proc cannot tell (psutil then decides).
    Importing psutil costs a run more CPU than the rest of its bookkeeping."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise ValueError(pid)
    if not os.path.isdir("/proc/self/task"):
        return None  # not Linux
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
        if not _BOOT_TIME:
            with open("/proc/stat", "rb") as handle:
                line = next(x for x in handle if x.startswith(b"btime"))
            _BOOT_TIME.append(float(line.split()[1]))
        fields = data[data.rindex(b")") + 2:].split()
        return fields[0].decode(), int(fields[19]) / os.sysconf("SC_CLK_TCK") + _BOOT_TIME[0]
    except FileNotFoundError:
        return GONE
    except (OSError, ValueError, IndexError, StopIteration):
        return None


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


def is_ancestor(proc: dict[str, Any] | None) -> bool:
    """True when the recorded process is this one or one of its ancestors.
    A supervisor is a subreaper: whatever its run double-forks or setsids
    stays below it while it lives."""
    if not proc or not alive(proc):
        return False
    pid = os.getpid()
    for _ in range(4096):  # a parent chain is short; the bound stops a loop
        if pid == proc.get("pid"):
            return True
        seen = _proc_stat(pid)
        parent = _ppid(pid)
        if seen is GONE or parent is None or parent <= 1:
            return False
        pid = parent
    return False


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return int(handle.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        try:
            import psutil

            return psutil.Process(pid).ppid()
        except Exception:  # noqa: BLE001 - gone, or no access
            return None

