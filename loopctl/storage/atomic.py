"""Atomic files (DESIGN §2): a reader sees the old file or the new one, whole.

Every file loopctl writes goes through `atomic_write`: a private temp file
beside the target, fsync, rename, fsync of the folder. JSON is written by
`strict_json`, which refuses NaN and infinities rather than leaving a file
other parsers reject.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from loopctl.domain.errors import LoopctlError
from loopctl.storage.paths import FILE_MODE

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


def strict_json(data: Any, indent: int | None = None, sort_keys: bool = True) -> str:
    """JSON that every parser accepts: NaN and infinities are refused, never
    written (they would make the file unreadable to `jq` and browsers)."""
    try:
        return json.dumps(data, sort_keys=sort_keys, allow_nan=False, indent=indent,
                          separators=None if indent else (",", ":"))
    except ValueError as exc:
        raise LoopctlError(f"refusing to write a non-finite number ({exc}); "
                           "the previous file is unchanged") from None



def atomic_write(path: Path, data: bytes, durable: bool = True,
                 before_replace: Callable[[list[int]], None] | None = None) -> None:
    """Replace `path` with `data` so a reader sees the old or the new file,
    whole, whatever happens to this process (SIGKILL, full disk); `durable`
    also survives a power cut (a cache that can be rebuilt skips that).
    `before_replace` is given the new file's signature (paths.file_signature:
    a rename keeps it) just before the new file takes the name."""
    fd, tmp = _create_temp(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.chmod(tmp, FILE_MODE)
        if before_replace is not None:
            st = os.stat(tmp)
            before_replace([st.st_mtime_ns, st.st_size, st.st_ino])
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise LoopctlError(f"cannot write {path}: {exc.strerror}; "
                               "the previous file is unchanged") from None
        raise
    if durable:
        _fsync_dir(path.parent)


def remove_file(path: Path) -> None:
    """Remove one of loopctl's files; already gone is fine."""
    path.unlink(missing_ok=True)


def _create_temp(path: Path) -> tuple[int, str]:
    """A new private file beside `path` (what tempfile.mkstemp does, without
    the ~5 ms its import of shutil, random and the compressors costs every
    run)."""
    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{os.urandom(6).hex()}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                           | getattr(os, "O_CLOEXEC", 0), FILE_MODE), tmp
        except FileExistsError:
            continue
        except OSError as exc:
            raise LoopctlError(f"cannot write {path}: {exc.strerror}; "
                               "the previous file is unchanged") from None
    raise LoopctlError(f"cannot write {path}: no free temporary name")


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
