"""What every command shares: the JSON version, the locked read of one loop,
the reconciled snapshot that reading commands use.

Each module of this package is what one group of commands does, as small
functions over a Store that return records (domain/result.py: named fields,
`to_json()` the `--json` shape); the CLI renders the fields as text or
prints `to_json()`, and tests call them directly.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from loopctl import clock
from loopctl.domain import lifecycle, result
from loopctl.domain.errors import NoSuchLoop, UsageError
from loopctl.domain.model import LoopDef
from loopctl.storage.definitions import Definitions
from loopctl.storage.store import Store

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

JSON_VERSION = result.JSON_VERSION


def raw_entry(defs: Definitions, name: str) -> Mapping[str, Any]:
    """The loop's entry as loops.yaml holds it (the user's mapping, read
    only: `update` changes a copy), or the error that says why not."""
    if not defs.has(name):
        raise NoSuchLoop(name)
    raw = defs.raw(name)
    if name in defs.invalid or not isinstance(raw, dict):
        raise UsageError(f"loop {name!r} is invalid ({defs.invalid.get(name)}); fix it in "
                         "loops.yaml first")
    return raw


@contextmanager
def no_cycle_collection() -> Iterator[None]:
    """A reading command builds tens of thousands of small dicts at 10,000
    loops, none of them in a cycle, and the cyclic collector walks them all
    again and again as they pile up: about a third of `ls`'s CPU there
    (bench/README.md). Reference counting still frees everything; the
    collector is turned back on after (tests call these in one process)."""
    import gc

    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@contextmanager
def locked_loop(store: Store, name: str) -> Iterator[tuple[Definitions, dict[str, Any],
                                                           LoopDef, float]]:
    """Under the store lock: definitions, reconciled state, the loop, now.
    Unknown loop: exit 4; invalid entry: exit 2."""
    now = clock.now()
    with store.lock():
        defs = store.read_defs()
        state = store.read_state()
        lifecycle.reconcile(defs.loops, defs.invalid, state, now, clock.zone_of,
                            shared=store.shared() is not None)
        loop = defs.loops.get(name)
        if loop is None:
            raw_entry(defs, name)  # raises the right error
        assert loop is not None
        yield defs, state, loop, now


def snapshot(store: Store, name: str | None = None) -> tuple[Definitions, dict[str, Any], float]:
    """Definitions and state as they are, reconciled in memory only: reading
    commands never write loops.yaml or state.json. With `name`, the state
    holds that loop alone (`status` of one of 10,000 reconciles one)."""
    now = clock.now()
    defs = store.read_defs()
    state = store.read_state()
    loops = defs.loops
    if name is not None:
        loops = {name: defs.loops[name]} if name in defs.loops else {}
        entry = state["loops"].get(name)
        state["loops"] = {} if entry is None else {name: entry}
    lifecycle.reconcile(loops, defs.invalid, state, now, clock.zone_of,
                        shared=store.shared() is not None and name is None)
    # The one file a reading command writes, a derived copy; last, so that a
    # command failing on a damaged state.json leaves every file as it was.
    store.keep_parsed()
    return defs, state, now
