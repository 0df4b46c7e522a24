"""`loopctl notes NAME [--clear]` (DESIGN §16): a loop's notes, kept across runs."""

from __future__ import annotations

from typing import Any

from loopctl.commands.common import JSON_VERSION
from loopctl.domain.checks import check_name
from loopctl.domain.errors import NoSuchLoop
from loopctl.storage.store import Store


def notes(store: Store, name: str, clear: bool = False) -> dict[str, Any]:
    """The notes as kept (after `clear`: none). Unknown loop: exit 4."""
    from loopctl.storage.notes import clear_notes, read_notes

    defs = store.read_defs()
    if not defs.has(name):
        raise NoSuchLoop(name)
    check_name(name)  # a hand-edited `../x` names no file
    loop = defs.loops.get(name)
    cleared = clear_notes(store.paths, name) if clear else False
    text = read_notes(store.paths, name)
    return {"version": JSON_VERSION, "loop": name, "notes": text,
            "bytes": len(text.encode()), "enabled": bool(loop and loop.notes),
            "cleared": cleared}
