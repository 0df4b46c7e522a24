"""Process identity: pid + create time, and whether it is still alive.

A pid alone is not an identity (pids are reused), so every process loopctl
records (in state.json and the lease) is `{pid, ct}` with psutil's create
time. Storage keeps these records and the lease asks whether its holder
lives, so the identity lives here, below the engine that spawns processes.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
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
        except Exception:  # gone, or no access
            return None

