"""Inter-process file locks.

On POSIX this is `fcntl.flock` directly, with a short backoff between
attempts. The `filelock` package polls every 50 ms by default; at 5 ms, a
hundred supervisors waiting on the store lock burned both cores (see
bench/README.md), and its import alone costs ~40 ms per process. Where
`fcntl` is missing (Windows) we fall back to `filelock`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from loopctl.storage.paths import FILE_MODE

FIRST_WAIT = 0.001
LONGEST_WAIT = 0.05
_held: set[int] = set()


class LockTimeout(Exception):
    pass


def _close_in_child() -> None:
    # A forked child must not keep the parent's locks alive.
    for fd in list(_held):
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_in_child)


@contextmanager
def hold(path: Path, timeout: float) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created 0600) for the block."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        from filelock import FileLock, Timeout

        lock = FileLock(path, timeout=timeout, mode=FILE_MODE)
        try:
            lock.acquire()
        except Timeout:
            raise LockTimeout(str(path)) from None
        try:
            yield
        finally:
            lock.release()
        return

    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        deadline = time.monotonic() + timeout
        wait = FIRST_WAIT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout(str(path)) from None
                time.sleep(wait)
                wait = min(wait * 2, LONGEST_WAIT)
        _held.add(fd)
        try:
            yield
        finally:
            _held.discard(fd)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextmanager
def locked(path: Path, timeout: float, busy: str) -> Iterator[None]:
    """`hold`, with failures to take the lock as loopctl errors: `busy`
    (exit 75) on a timeout, one line naming the file for anything else.
    Errors raised inside the block pass through untouched."""
    from loopctl.domain.errors import BusyError, LoopctlError

    held = ExitStack()
    try:
        held.enter_context(hold(path, timeout))
    except LockTimeout:
        raise BusyError(busy) from None
    except OSError as exc:
        raise LoopctlError(f"cannot lock {path}: {exc.strerror}") from None
    with held:
        yield
