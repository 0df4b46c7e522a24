"""Opening a path an agent could have replaced (DESIGN §14).

Every component is opened relative to the one before it, none followed if
it is a symbolic link: a folder the agent may write cannot send loopctl
elsewhere by turning a component into a link. Files are opened
non-blocking and checked to be regular files before a byte is read (a FIFO
never blocks, a device is never read) and read only up to a bound.

`Refused` names the component that was wrong and how; a path that does not
exist is None, not an error (nothing to read, nothing to grant).
"""

from __future__ import annotations

import os
import posixpath
import stat

_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(Exception):
    """A path that is not what loopctl may open: `path` and `why`."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path = path
        self.why = why


class _Missing(Exception):
    pass


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "a regular file"


def _parts(path: str) -> list[str]:
    if not path.startswith("/") or "\0" in path:
        raise Refused(path, "expected an absolute path")
    return [p for p in posixpath.normpath(path).split("/") if p]


def _step(fd: int, part: str, where: str) -> int:
    """The folder `part` inside `fd`, never through a link."""
    try:
        return os.open(part, _DIR, dir_fd=fd)
    except FileNotFoundError:
        raise _Missing() from None
    except NotADirectoryError:
        mode = os.lstat(part, dir_fd=fd).st_mode
        raise Refused(where, f"{_kind(mode)}, not a real folder") from None


def _parent(path: str) -> tuple[int, str]:
    """(an O_PATH descriptor of the folder holding `path`, its last name)."""
    parts = _parts(path)
    if not parts:
        raise Refused(path, "the root itself")
    fd = os.open("/", _DIR)
    done = ""
    try:
        for part in parts[:-1]:
            done += "/" + part
            nxt = _step(fd, part, done)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]


def open_rule(path: str) -> int | None:
    """An O_PATH descriptor of `path` (a real folder or a regular file,
    every folder above it real) for a sandbox rule; None if it is missing."""
    try:
        parent, name = _parent(path)
    except _Missing:
        return None
    try:
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    except FileNotFoundError:
        return None
    finally:
        os.close(parent)
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        os.close(fd)
        raise Refused(path, f"{_kind(mode)}, not a real folder or file")
    return fd


def read_file(path: str, limit: int, *, whole: bool = False) -> bytes | None:
    """At most `limit` bytes of the regular file at `path` (None: missing).
    `whole`: a longer file is refused rather than cut."""
    fd = _open_file(path)
    if fd is None:
        return None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise Refused(path, f"{_kind(mode)}, not a regular file")
        data = _read(fd, limit + 1 if whole else limit)
    finally:
        os.close(fd)
    if whole and len(data) > limit:
        raise Refused(path, f"larger than {limit} bytes")
    return data


def _open_file(path: str) -> int | None:
    """A read-only fd of the last component of `path`, every component
    opened without following a link (None: missing)."""
    try:
        parent, name = _parent(path)
    except _Missing:
        return None
    try:
        return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                       dir_fd=parent)
    except FileNotFoundError:
        return None
    except OSError as exc:  # ELOOP: the last component is a link
        mode = _lmode(parent, name)
        raise Refused(path, _kind(mode) if mode is not None else str(exc.strerror)) from None
    finally:
        os.close(parent)


def _lmode(parent: int, name: str) -> int | None:
    try:
        return os.lstat(name, dir_fd=parent).st_mode
    except OSError:
        return None


def _read(fd: int, limit: int) -> bytes:
    chunks, size = [], 0
    while size < limit and (chunk := os.read(fd, min(limit - size, 1 << 20))):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def make_dirs(path: str, mode: int = 0o700) -> None:
    """`path` and its missing parents as real folders: an existing link at
    any component is refused, never followed (`os.makedirs` would create
    through it)."""
    parts = _parts(path)
    fd = os.open("/", _DIR)
    done = ""
    try:
        for part in parts:
            done += "/" + part
            try:
                nxt = _step(fd, part, done)
            except _Missing:
                try:
                    os.mkdir(part, mode, dir_fd=fd)
                except FileExistsError:
                    pass  # made meanwhile: looked at again below
                try:
                    nxt = _step(fd, part, done)
                except _Missing:
                    raise Refused(done, "removed while it was being made") from None
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)


def read_tail(path: str, limit: int) -> tuple[bytes, bool] | None:
    """The last `limit` bytes of the regular file at `path` and whether
    more came before them; None when it is missing. Every component as
    `read_file` opens it (no link followed), and the file must have one
    name: a hard link the agent made to another file is refused."""
    fd = _open_file(path)
    if fd is None:
        return None
    try:
        seen = os.fstat(fd)
        if not stat.S_ISREG(seen.st_mode) or seen.st_nlink != 1:
            raise Refused(path, f"{_kind(seen.st_mode)} with {seen.st_nlink} names, "
                          "not a file loopctl made")
        start = max(0, seen.st_size - limit)
        os.lseek(fd, start, os.SEEK_SET)
        return _read(fd, limit), start > 0
    finally:
        os.close(fd)
