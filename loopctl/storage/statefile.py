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

from loopctl.domain.errors import UnreadableError
from loopctl.domain.untrusted import shorten

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

# The version is state.json's, at this edge only: the domain sees LoopState
# records of the current shape whatever file they came from.
# 2: each entry leaves out the fields at their common value (LoopState.to_json).
# 1 (every field written out) is still read; the next write makes it 2.
# A future version 3 (a field renamed or split, say) would be read by adding
# it to READ_VERSIONS and a step in `parse_state` turning a version-2 entry
# into a version-3 one before `LoopState.from_json`/`from_written` see it,
# and writing 3 from then on; a newer version than this loopctl knows is
# refused (exit 3) rather than guessed at, so an older loopctl never drops
# what a newer one wrote.
STATE_VERSION = 2
READ_VERSIONS = (1, STATE_VERSION)


def empty_state() -> dict[str, Any]:
    return {"version": STATE_VERSION, "defs_sig": None, "wake_at": None,
            "busy": False, "loops": {}}


# What the `tick` fast path needs, kept beside state.json (entry.py).
SUMMARY_KEYS = ("version", "wake_at", "busy", "defs_sig", "saved_at")


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


# -- one loop's entry without decoding the others (`status NAME`) ---------------
#
# The entries go one to a line, after the top level's other fields:
#   {"version":2,...,"loops":{
#   "a":{...},
#   "b":{...}}}
# A compact encoding has no raw line break inside a value, so a line that
# starts with `"NAME":` is that loop's entry, and nothing else is.

_LOOPS = ',"loops":{\n'


def top_of(state: dict[str, Any]) -> dict[str, Any]:
    """The state's top level as written: all but `loops`, the account
    marks as their entries (domain.accounts.table_json)."""
    top = {k: v for k, v in state.items() if k != "loops"}
    if "accounts" in top:
        from loopctl.domain.accounts import table_json

        top["accounts"] = table_json(top["accounts"])
    return top


def encode_state(top: dict[str, Any], entries: dict[str, Any]) -> bytes:
    """state.json's bytes: `top` (without `loops`) and the packed entries,
    each entry written by the C encoder in one call for all of them."""
    from json import encoder

    make = getattr(encoder, "c_make_encoder", None)
    head = _strict(top)
    if make is None or not entries:
        return (head[:-1] + _LOOPS + _strict(entries)[1:] + "}").encode()
    one = make(None, None, encoder.encode_basestring_ascii, None, ":", ",", False, False,
               False)
    try:
        texts = list(map("".join, map(one, entries.values(), [0] * len(entries))))
        keys = list(map(encoder.encode_basestring_ascii, entries))
    except (ValueError, TypeError):  # NaN, or a type JSON has not: say which, as before
        _strict(entries)
        raise
    return (head[:-1] + _LOOPS + ",\n".join(map(":".join, zip(keys, texts, strict=True)))
            + "}}").encode()


def _strict(value: Any) -> str:
    from loopctl.storage.atomic import strict_json

    return strict_json(value, sort_keys=False)


def entry_of(raw: bytes, name: str) -> tuple[dict[str, Any], Any] | None:
    """The top level (without `loops`) and the entry for `name` as written
    (None: no entry) of state bytes laid out as `encode_state` writes them;
    None for any other layout. The caller has checked the bytes are
    loopctl's (their MAC)."""
    from json import encoder

    from loopctl.storage.jsonlines import line_span

    cut = raw.find(_LOOPS.encode())
    if cut < 0 or raw.find(b"\n") != cut + len(_LOOPS) - 1 or not raw.endswith(b"}}"):
        return None
    try:
        top = json.loads(raw[:cut] + b"}")
        key = encoder.encode_basestring_ascii(name).encode() + b":"
        span = line_span(raw, key, cut)
        if span is None:
            return (top, None) if isinstance(top, dict) else None
        text = raw[span[0] + len(key):span[1]]
        return (top, json.loads(text)) if isinstance(top, dict) else None
    except ValueError:
        return None



def entries_holding(raw: bytes, key: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The top level and the entries as written whose line holds the field
    `key` (a superset of those that have it: a string cannot hold `"KEY":`,
    whose quotes it would escape, but a nested mapping can), decoding those
    lines alone; None for another layout. The caller checked the MAC."""
    cut = raw.find(_LOOPS.encode())
    if cut < 0 or raw.find(b"\n") != cut + len(_LOOPS) - 1 or not raw.endswith(b"}}"):
        return None
    probe, found = json.dumps(key).encode() + b":", {}
    try:
        top = json.loads(raw[:cut] + b"}")
        at = raw.find(probe, cut)
        while at >= 0:
            start = raw.rfind(b"\n", cut, at) + 1
            end = raw.find(b"\n", at)
            stop = end - 1 if end >= 0 else len(raw) - 2
            found.update(json.loads(b"{" + raw[start:stop] + b"}"))
            at = raw.find(probe, end) if end >= 0 else -1
    except ValueError:
        return None
    return (top, found) if isinstance(top, dict) else None
