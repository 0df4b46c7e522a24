"""Wake the daemon the moment `state.json` or `loops.yaml` is replaced.

`loopctl trigger`, `resume`, `start` and every settled run write state.json
(atomically: a rename into the state folder), and an edit of loops.yaml
lands in the config folder. Linux inotify on those two folders (not the
files: a rename replaces the inode) turns each such write into a readable
descriptor that the daemon's select() waits on beside its signal pipe, so a
trigger fires within a pass's time instead of at the next one-second stat()
(bench/trigger_latency.py). Elsewhere, or when inotify cannot be had (no
libc symbol, the per-user watch limit), `open_watch` returns None and the
daemon keeps its one-second stat() alone, which it does anyway as a backstop.
"""

from __future__ import annotations

import os
import struct

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

# <sys/inotify.h>
IN_MODIFY = 0x002
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_Q_OVERFLOW = 0x4000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
_MASK = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name


class FileWatch:
    """One inotify descriptor watching folders for a few file names."""

    def __init__(self, fd: int, names: frozenset[bytes]) -> None:
        self.fd = fd
        self.names = names

    def fileno(self) -> int:
        return self.fd

    def drain(self) -> bool:
        """Read every pending event; True when one named a watched file (or
        the queue overflowed, so one may have been lost)."""
        hit = False
        while True:
            try:
                data = os.read(self.fd, 64 * 1024)
            except (BlockingIOError, InterruptedError):
                return hit
            if not data:
                return hit
            hit = _names_hit(data, self.names) or hit

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


def _names_hit(data: bytes, names: frozenset[bytes]) -> bool:
    pos = 0
    while pos + _EVENT.size <= len(data):
        _wd, mask, _cookie, length = _EVENT.unpack_from(data, pos)
        name = data[pos + _EVENT.size:pos + _EVENT.size + length].rstrip(b"\0")
        pos += _EVENT.size + length
        if mask & IN_Q_OVERFLOW or name in names:
            return True
    return False


def open_watch(folders: Iterable[str], names: Iterable[str]) -> FileWatch | None:
    """Watch `folders` for writes, renames and removals of `names`; None when
    inotify is not available here."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        init, add = libc.inotify_init1, libc.inotify_add_watch
    except (OSError, AttributeError, ImportError):
        return None
    fd = init(IN_NONBLOCK | IN_CLOEXEC)
    if fd < 0:
        return None
    watch = FileWatch(fd, frozenset(name.encode() for name in names))
    for folder in folders:
        if add(fd, os.fsencode(folder), _MASK) < 0:
            watch.close()
            return None
    return watch
