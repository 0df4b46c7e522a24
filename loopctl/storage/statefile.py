"""`state.json` on disk: reading it strictly and the summary beside it.

The file is loopctl's own (runtime status of every loop, DESIGN §2), written
only by `Store.write_state`; a damaged one fails to parse with one line
saying what to do (exit 3), and a FIFO or folder planted in its place is
refused without blocking. `summary.json` beside it carries what the `tick`
fast path needs (entry.py) and the hash of the state bytes it describes.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from loopctl.domain.errors import UnreadableError
from loopctl.domain.untrusted import shorten

# 2: each entry leaves out the fields at their common value (domain.state.pack).
# 1 (every field written out) is still read; the next write makes it 2.
STATE_VERSION = 2
READ_VERSIONS = (1, STATE_VERSION)


def empty_state() -> dict[str, Any]:
    return {"version": STATE_VERSION, "defs_sig": None, "wake_at": None,
            "busy": False, "loops": {}}


# What the `tick` fast path needs, kept beside state.json (entry.py).
SUMMARY_KEYS = ("version", "wake_at", "busy", "defs_sig", "saved_at")


def sha256_hex(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def read_state_bytes(path: Path) -> bytes | None:
    """state.json's bytes; None when there is none yet (an empty file is
    damage, and fails to parse like any other)."""
    try:
        # O_NONBLOCK: a FIFO planted as state.json must not hang every command.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UnreadableError(f"{path}: cannot read state: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "Is a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise UnreadableError(f"{path}: cannot read state: {kind}")
        with os.fdopen(os.dup(fd), "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise UnreadableError(f"{path}: cannot read state: {exc.strerror}") from None
    finally:
        os.close(fd)


def read_state_file(path: Path) -> dict[str, Any]:
    return parse_state(read_state_bytes(path), path)


def parse_state(raw: bytes | None, path: Path, unpacked: bool = True) -> dict[str, Any]:
    """The state in `raw`; `unpacked=False`: each entry as written (the
    listing reads the few fields it shows with their common values)."""
    if raw is None:
        return empty_state()
    try:
        state = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise UnreadableError(f"{path}: state is not valid JSON ({exc}); "
                              "move it aside to start over") from None
    if not isinstance(state, dict):
        raise UnreadableError(f"{path}: state is a JSON {type(state).__name__}; expected an "
                              "object with 'version' and 'loops'; move it aside to start over")
    if state.get("version") not in READ_VERSIONS:
        raise UnreadableError(f"{path}: unknown state version {shorten(state.get('version'))}; "
                              f"expected {STATE_VERSION}")
    loops = state.get("loops")
    if not isinstance(loops, dict):
        raise UnreadableError(f"{path}: state has no 'loops' mapping; move it aside to "
                              "start over")
    if state["version"] == STATE_VERSION and unpacked:
        from loopctl.domain.state import unpack

        state["loops"] = {name: unpack(entry) for name, entry in loops.items()}
    return state

