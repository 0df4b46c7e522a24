"""The home's secret key: what makes loopctl's derived files its own.

`defs-cache.json` says which commands run and `summary.json` says whether
`state.json` needs checking again; both are rebuilt from `loops.yaml` and
`state.json` when missing. A file planted there (by an agent, or restored
from a shared cache) must not be taken for loopctl's: each one carries an
HMAC-SHA256 under this key, and one that does not verify is ignored. The key
is 32 random bytes in `<state>/home.key`, 0600, made on the first write; a
key that is not a private regular file of this user is not used (and then
nothing derived is trusted: every read parses the YAML, as with no cache).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from loopctl.fast.digests import compare_digest, hmac_sha256
from loopctl.storage.paths import FILE_MODE

KEY_BYTES = 32
NAME = "home.key"


def load(state_dir: Path, create: bool = False) -> bytes | None:
    """The key, made first when `create` and there is none; None when there
    is none or the file is not one loopctl would have made."""
    path = state_dir / NAME
    key = _read(path)
    if key is None and create and not os.path.lexists(path):
        _make(path)
        key = _read(path)
    return key


def _read(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() \
                or info.st_mode & 0o077 or info.st_size != KEY_BYTES:
            return None
        key = os.read(fd, KEY_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return key if len(key) == KEY_BYTES else None


def _make(path: Path) -> None:
    """Written whole under a temporary name, then linked into place: a
    reader never sees half a key, and of two makers the first one wins."""
    temp = path.with_name(f".{NAME}.{os.getpid()}")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     FILE_MODE)
        try:
            os.write(fd, os.urandom(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.link(temp, path)
    except OSError:
        pass  # another maker won, or the folder is read-only: no key, no cache
    finally:
        try:
            os.unlink(temp)
        except OSError:
            pass


def mac(key: bytes, data: bytes) -> str:
    return hmac_sha256(key, data)


def verify(key: bytes | None, data: bytes, tag: object) -> bool:
    return key is not None and isinstance(tag, str) and compare_digest(mac(key, data), tag)
