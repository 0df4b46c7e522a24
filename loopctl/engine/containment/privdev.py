"""A confined run's own terminals and shared memory (DESIGN §14).

`/dev/pts` holds every terminal of the machine (what the user types into
another one, a sudo password included) and `/dev/shm` is one folder every
process shares: Landlock can grant a folder or not, never "only what this
run made". So neither is granted as it is. Where this process may make a
mount namespace (CAP_SYS_ADMIN: root, or a container that has it), or a
user namespace with one in it (a normal user, where the kernel allows
unprivileged user namespaces: the same uid and gid mapped inside, other
owners shown as `nobody`), the confined child gets, before its domain is
applied, a namespace of its own with a new devpts instance on `/dev/pts`
(its `ptmx` bound over `/dev/ptmx`) and an empty tmpfs on `/dev/shm`;
only those are granted. The run can open new terminals and share memory
among its own processes, and sees no other run's or user's. Mounts
propagate into the namespace, never out of it (`/` is made a slave
first; if that fails nothing is mounted). Elsewhere the run gets neither:
new terminals and POSIX shared memory (`shm_open`, `sem_open`, Python's
multiprocessing locks) fail in it.

Applied between fork and exec, like the domain: a few system calls.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

from loopctl.engine.containment import landlock

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MS_BIND = 4096
MS_REC = 16384
MS_SLAVE = 1 << 19
CAP_SYS_ADMIN = 21
SHM_SIZE = "50%"  # tmpfs's own default, said out loud
FOLDERS = ("/dev/pts", "/dev/shm")

_how: list[str | None] = []
# Where a kernel says whether a user may make a user namespace, and what it
# must say ("1" for Debian's switch, "0" for Ubuntu's AppArmor restriction).
USERNS_SWITCHES = (("/proc/sys/kernel/unprivileged_userns_clone", "1"),
                   ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "0"))


def how() -> str | None:
    """`mount` (this process may make a mount namespace: CAP_SYS_ADMIN),
    `user` (it may make a user namespace first, with a mount namespace in
    it), or None. Checked once."""
    if not _how:
        found: str | None = None
        if os.path.isdir("/dev/pts"):
            found = "mount" if _has_sys_admin() else "user" if _userns_allowed() else None
        _how.append(found)
    return _how[0]


def possible() -> bool:
    return how() is not None


def _has_sys_admin() -> bool:
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as handle:
            line = next((x for x in handle if x.startswith("CapEff:")), "CapEff: 0")
        return bool(int(line.split()[1], 16) >> CAP_SYS_ADMIN & 1)
    except (OSError, ValueError, IndexError):
        return False


def _userns_allowed() -> bool:
    if _read("/proc/sys/user/max_user_namespaces") in (None, "0"):
        return False
    return all(_read(path) in (None, wanted) for path, wanted in USERNS_SWITCHES)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read(64).strip()
    except OSError:
        return None


def describe(private: bool) -> str:
    if private and how() == "user":
        return ("/dev/pts and /dev/shm: the run's own (a devpts instance and a tmpfs, in a "
                "user namespace of its own; neither if the kernel refuses one)")
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
    as_user = how() == "user"
    # The same ids inside as outside: the agent sees itself as it is.
    maps = (("/proc/self/setgroups", b"deny"),
            ("/proc/self/uid_map", f"{os.geteuid()} {os.geteuid()} 1".encode()),
            ("/proc/self/gid_map", f"{os.getegid()} {os.getegid()} 1".encode()))

    def mounted(source: bytes | None, target: bytes, kind: bytes | None, flags: int,
                data: bytes | None) -> bool:
        return int(mount(source, target, kind, ctypes.c_ulong(flags), data)) == 0

    def enter() -> None:
        if as_user:
            if unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
                return
            for path, line in maps:
                _write(path, line)
        elif unshare(CLONE_NEWNS) != 0:
            return
        if not mounted(None, b"/", None, MS_REC | MS_SLAVE, None):
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


def _write(path: str, data: bytes) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.write(fd, data)
    except OSError:
        pass
    finally:
        os.close(fd)
