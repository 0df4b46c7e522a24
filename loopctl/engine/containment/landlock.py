"""Linux Landlock through its three system calls (DESIGN §14), with ctypes:
no dependency, no helper binary.

The ruleset is built in the supervisor (`build`); the agent's child process
only calls prctl(PR_SET_NO_NEW_PRIVS) and landlock_restrict_self on it
between fork and exec (`Ruleset.apply`, passed to Popen as `preexec_fn`).
Every process the agent starts inherits the domain, and nothing it does can
lift it: Landlock only ever adds restrictions.

The constants are the kernel's uapi (include/uapi/linux/landlock.h); the
ones newer than this machine's header (TRUNCATE, IOCTL_DEV, the scopes) are
checked against the running kernel by tests/engine/test_sandbox_landlock.py.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys

# x86_64, aarch64, riscv64 and every other architecture on the generic table
# share these numbers (arch/*/unistd: 444-446 since Linux 5.13).
SYS_CREATE_RULESET = 444
SYS_ADD_RULE = 445
SYS_RESTRICT_SELF = 446
PR_SET_NO_NEW_PRIVS = 38
CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1
EBADFD = 77  # landlock_add_rule on an object outside any filesystem

FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2: link and rename across directories
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

# Every filesystem right the kernel knows, by ABI (each ABI adds to the last;
# ABI 4 added TCP rights and ABI 7 audit flags: no new filesystem right).
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
# What a rule on a file (not a directory) may hold; the kernel refuses the rest.
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
DEVICE = FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV


class LandlockError(Exception):
    """Why the kernel cannot confine here (or refused a step)."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64),
                ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is packed: 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
        _libc.prctl.restype = ctypes.c_int
    return _libc


def _fail(what: str) -> LandlockError:
    err = ctypes.get_errno()
    return LandlockError(f"{what}: {os.strerror(err)} (errno {err})")


def available() -> tuple[int, str | None]:
    """(the Landlock ABI loopctl will use, None) or (0, why not)."""
    from loopctl.settings import knob

    cap = int(knob("LOOPCTL_SANDBOX_ABI"))
    if cap == 0:
        return 0, "LOOPCTL_SANDBOX_ABI=0 (set in the environment)"
    try:
        return min(abi(), cap), None
    except LandlockError as exc:
        return 0, str(exc)


def abi() -> int:
    """The kernel's Landlock ABI version; raises LandlockError saying why none."""
    if not sys.platform.startswith("linux"):
        raise LandlockError(f"Landlock is Linux only (this is {sys.platform})")
    version = _lib().syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0),
                             ctypes.c_uint32(CREATE_RULESET_VERSION))
    if version < 0:
        err = ctypes.get_errno()
        why = {38: "the kernel has no Landlock (ENOSYS; Linux 5.13 or later needed)",
               95: "Landlock is built in but not enabled (EOPNOTSUPP; add landlock to lsm=)"}
        raise LandlockError(why.get(err, f"landlock_create_ruleset: {os.strerror(err)}"))
    return int(version)


def fs_rights(version: int) -> int:
    """Every filesystem access right of ABI `version`."""
    return _FS_BY_ABI[max(v for v in _FS_BY_ABI if v <= version)]


def scopes(version: int) -> int:
    return SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET if version >= 6 else 0


class Ruleset:
    """An open Landlock ruleset: rules added by path, applied in a child."""

    def __init__(self, version: int, handled: int | None = None,
                 scoped: int | None = None) -> None:
        """Every right of `version` handled (denied unless a rule grants it)
        and every scope, unless `handled`/`scoped` say which."""
        self.version = version
        self.handled = fs_rights(version) if handled is None else handled & fs_rights(version)
        self.scoped = scopes(version) if scoped is None else scoped & scopes(version)
        attr = _RulesetAttr(self.handled, 0, self.scoped)
        # The struct grew with each ABI: give the kernel the size it knows.
        size = 24 if version >= 6 else 16 if version >= 4 else 8
        fd = _lib().syscall(SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size),
                            ctypes.c_uint32(0))
        if fd < 0:
            raise _fail("landlock_create_ruleset")
        self.fd = int(fd)

    def allow(self, path: str, access: int, follow: bool = True) -> bool:
        """Grant `access` beneath `path` (a file gets only file rights).
        False when the path does not exist: nothing to grant. `follow`
        False: a symlink there is granted as itself, never its target."""
        flags = os.O_PATH | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
        try:
            target = os.open(path, flags)
        except OSError:
            return False
        try:
            return self.allow_fd(target, access, path)
        finally:
            os.close(target)

    def allow_fd(self, target: int, access: int, path: str) -> bool:
        """Grant `access` beneath the folder or file open at `target` (the
        caller's checked descriptor: what was checked is what is granted)."""
        # fstat of the descriptor itself (an O_PATH one too): what is open is
        # what is judged, without a walk through /proc.
        if not stat.S_ISDIR(os.fstat(target).st_mode):
            access &= FILE_RIGHTS
        rule = _PathBeneathAttr(access & self.handled, target)
        if _lib().syscall(SYS_ADD_RULE, ctypes.c_int(self.fd),
                          ctypes.c_int(RULE_PATH_BENEATH), ctypes.byref(rule),
                          ctypes.c_uint32(0)) < 0:
            if ctypes.get_errno() == EBADFD:
                return False  # a pipe or socket: no rule can name it
            raise _fail(f"landlock_add_rule {path}")
        return True

    def apply(self, privileged: bool = False) -> None:
        """In the child, before exec: no new privileges, then the domain.
        Only two system calls: this runs between fork and exec. `privileged`
        (root, for a domain that only scopes): the kernel lets CAP_SYS_ADMIN
        restrict itself without no_new_privs, so a setuid program the run
        starts keeps working; without the capability, as for everyone else."""
        lib = _lib()
        if privileged and lib.syscall(SYS_RESTRICT_SELF, ctypes.c_int(self.fd),
                                      ctypes.c_uint32(0)) == 0:
            return
        if lib.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise _fail("prctl(PR_SET_NO_NEW_PRIVS)")
        if lib.syscall(SYS_RESTRICT_SELF, ctypes.c_int(self.fd), ctypes.c_uint32(0)) != 0:
            raise _fail("landlock_restrict_self")

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
