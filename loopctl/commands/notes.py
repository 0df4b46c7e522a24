"""`loopctl notes NAME [--clear]` (DESIGN §16): a loop's notes, kept across runs."""

from __future__ import annotations

from loopctl.domain.checks import check_name
from loopctl.domain.errors import NoSuchLoop
from loopctl.domain.result import Result
from loopctl.fast.data_class import record
from loopctl.storage.store import Store


@record(frozen=True)
class Notes(Result):
    """A loop's notes as kept; `enabled`: the loop keeps notes (`--notes`);
    `cleared`: there were notes and `--clear` emptied them."""

    loop: str
    notes: str
    bytes: int
    enabled: bool
    cleared: bool


def notes(store: Store, name: str, clear: bool = False) -> Notes:
    """The notes as kept (after `clear`: none). Unknown loop: exit 4."""
    from loopctl.storage.notes import clear_notes, read_notes

    defs = store.read_defs()
    if not defs.has(name):
        raise NoSuchLoop(name)
    check_name(name)  # a hand-edited `../x` names no file
    loop = defs.loops.get(name)
    cleared = clear_notes(store.paths, name) if clear else False
    text = read_notes(store.paths, name)
    return Notes(loop=name, notes=text, bytes=len(text.encode()),
                 enabled=bool(loop and loop.notes), cleared=cleared)
