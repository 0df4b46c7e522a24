"""Whether the state directory's file system can take loopctl's writes.

A full disk stops run logs (the log pump drains to /dev/null) and state
writes fail whole (atomic_write leaves the previous file): nothing is
corrupted, but nothing is recorded either, so `doctor` must fail."""

from __future__ import annotations

import os
from pathlib import Path

MIN_FREE = 16 * 1024 * 1024  # one state.json, a record, the index and a log's tail
PROBE = 64 * 1024


def check_space(folder: Path) -> tuple[str | None, int]:
    """(what is wrong or None, bytes free to this user). A state directory
    not made yet is checked where it will be made. Wrong means a write
    fails; little room (under MIN_FREE) is the caller's warning."""
    while not folder.is_dir() and folder.parent != folder:
        folder = folder.parent
    try:
        seen = os.statvfs(folder)
    except OSError as exc:
        return f"cannot check free space of {folder}: {exc.strerror}", 0
    free = seen.f_bavail * seen.f_frsize
    from loopctl.storage.paths import unnamed_file

    try:
        # A real write, as the next record would do: statvfs alone misses
        # quotas and a read-only remount.
        with unnamed_file(folder) as probe:
            probe.write(b"\0" * PROBE)
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as exc:
        return f"cannot write to {folder}: {exc.strerror}", free
    return None, free


def remedy(problem: str) -> str:
    """What to do about `problem` (from check_space): room makes no
    read-only file system writable."""
    import errno

    if problem.endswith(os.strerror(errno.EROFS)):
        return "read-only file system: remount it read-write"
    return "free space"
