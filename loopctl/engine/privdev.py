"""A confined run's own terminals and shared memory (DESIGN §14).

`/dev/pts` holds every terminal of the machine (what the user types into
another one, a sudo password included) and `/dev/shm` is one folder every
process shares: Landlock can grant a folder or not, never "only what this
run made". So neither is granted as it is. Where this process may make a
mount namespace (CAP_SYS_ADMIN: root, or a container that has it), the
confined child gets, before its domain is applied, a namespace of its own
with a new devpts instance on `/dev/pts` (with its `ptmx` bound over
`/dev/ptmx`) and an empty tmpfs on `/dev/shm`; only those are granted. The
run can open new terminals and share memory among its own processes, and
sees no other run's or user's. Mounts propagate into the namespace, never
out of it (`/` is made a slave first; if that fails nothing is mounted).
Elsewhere the run gets neither: new terminals and POSIX shared memory
(`shm_open`, `sem_open`, Python's multiprocessing locks) fail in it.

Applied between fork and exec, like the domain: a few system calls.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

from loopctl.engine import landlock

CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MS_BIND = 4096
MS_REC = 16384
MS_SLAVE = 1 << 19
CAP_SYS_ADMIN = 21
SHM_SIZE = "50%"  # tmpfs's own default, said out loud
FOLDERS = ("/dev/pts", "/dev/shm")

_capable: list[bool] = []


def possible() -> bool:
    """Whether this process may make a mount namespace (checked once)."""
    if not _capable:
        _capable.append(_has_sys_admin() and os.path.isdir("/dev/pts"))
    return _capable[0]


def _has_sys_admin() -> bool:
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as handle:
            line = next((x for x in handle if x.startswith("CapEff:")), "CapEff: 0")
        return bool(int(line.split()[1], 16) >> CAP_SYS_ADMIN & 1)
    except (OSError, ValueError, IndexError):
        return False


def describe(private: bool) -> str:
    if private:
        return "/dev/pts and /dev/shm: the run's own (a devpts instance and a tmpfs)"
    return ("/dev/pts and /dev/shm: not granted (no mount namespace here: new terminals "
            "and POSIX shared memory fail)")


def entering(ruleset: landlock.Ruleset) -> Callable[[], None]:
    """The child's step before its domain: a namespace of its own with a
    new /dev/pts and /dev/shm, each granted in `ruleset`. Anything the
    kernel refuses leaves that folder ungranted (never shared)."""
    libc = ctypes.CDLL(None, use_errno=True)
    unshare, mount = libc.unshare, libc.mount
    every = ruleset.handled

    def mounted(source: bytes | None, target: bytes, kind: bytes | None, flags: int,
                data: bytes | None) -> bool:
        return int(mount(source, target, kind, ctypes.c_ulong(flags), data)) == 0

    def enter() -> None:
        if unshare(CLONE_NEWNS) != 0 or not mounted(None, b"/", None, MS_REC | MS_SLAVE, None):
            return
        if mounted(b"devpts", b"/dev/pts", b"devpts", MS_NOSUID | MS_NOEXEC,
                   b"newinstance,ptmxmode=0666,mode=0620"):
            ruleset.allow("/dev/pts", every)
            # The host's /dev/ptmx makes terminals in the host's instance.
            if mounted(b"/dev/pts/ptmx", b"/dev/ptmx", None, MS_BIND, None):
                ruleset.allow("/dev/ptmx", landlock.DEVICE | landlock.READ)
        if mounted(b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV,
                   b"mode=1777,size=" + SHM_SIZE.encode()):
            ruleset.allow("/dev/shm", every)

    return enter
