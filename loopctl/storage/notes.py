"""A loop's notes (DESIGN §16): `notes/<loop>.md` in loopctl's state folder.

Only loopctl writes this file (atomically); the agent works on a copy in its
run's decision folder (`$LOOPCTL_NOTES_FILE`), which loopctl reads back
without following a symlink or blocking on a FIFO.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from loopctl.domain.feedback import MAX_NOTES, keep_notes
from loopctl.storage.paths import FILE_MODE, Paths, file_signature, read_bounded, real_dir


def notes_path(paths: Paths, loop: str) -> Path:
    """`notes/<loop>.md`; a name that could leave that folder is refused."""
    return paths.state_dir / "notes" / f"{paths.loop_runs_dir(loop).name}.md"


def read_notes(paths: Paths, loop: str) -> str:
    """The kept notes ('' when there are none, or the file is not loopctl's:
    a symlink, a folder, over the bound)."""
    data = read_bounded(notes_path(paths, loop), MAX_NOTES + 4)
    return keep_notes(data)[0] if data else ""


def signature(paths: Paths, loop: str) -> list[int] | None:
    return file_signature(notes_path(paths, loop))


def write_notes(paths: Paths, loop: str, text: str) -> None:
    from loopctl.storage.atomic import atomic_write

    path = notes_path(paths, loop)
    real_dir(path.parent)
    atomic_write(path, text.encode("utf-8", "replace"))


def clear_notes(paths: Paths, loop: str) -> bool:
    """Remove the notes; whether there were any."""
    try:
        os.unlink(notes_path(paths, loop))
    except FileNotFoundError:
        return False
    return True


def write_copy(path: Path, text: str) -> None:
    """The run's copy, made new (never through something already there)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    with os.fdopen(fd, "wb") as handle:
        handle.write(text.encode("utf-8", "replace"))


def read_copy(path: Path) -> tuple[bytes | None, int, str | None]:
    """(at most MAX_NOTES + 4 bytes, the file's size, why not) of what the
    agent left at `path`: never through a symlink, never from a FIFO, a
    device or a folder."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None, 0, "the agent removed its notes file"
    except OSError as exc:
        return None, 0, f"notes file unreadable: {exc.strerror}"  # ELOOP: a symlink
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, 0, "notes file unreadable: not a regular file"
        chunks, size = [], 0
        while size < MAX_NOTES + 4 and (chunk := os.read(fd, MAX_NOTES + 4 - size)):
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks), max(info.st_size, size), None
    except OSError as exc:
        return None, 0, f"notes file unreadable: {exc.strerror}"
    finally:
        os.close(fd)
