"""Whether a command must check the team store before it acts, decided
cheaply: most homes have no store, and every command (a daemon-fired run,
`ls`) passes here, so this module imports nothing but `os` until a store
may be set."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not `typing`: this module must stay cheap

if TYPE_CHECKING:
    from typing import Any

ENV_STORE = "LOOPCTL_STORE"
# storage/definitions.MAX_DEFS_BYTES, not imported: this module must stay
# cheap (tests/store/test_choosing_a_store.py holds the two equal).
MAX_DEFS_BYTES = 8 * 1024 * 1024
# Commands that never act on loops: `store` is how a store is set up and
# checked; `validate` reports on loops.yaml alone. And `daemon`, which must
# outlive the store's outages: each pass that would fire checks the store,
# fails closed, says so once and retries with backoff (engine/daemon.py).
# And `export`, which writes files for another scheduler: the target
# connects when it fires, so exporting needs neither psycopg nor the server.
UNGATED = {"store", "validate", "completion", "agents", "daemon", "export", "__names",
           "__targets"}


def gated(args: list[str]) -> bool:
    """Whether the command `args` must pass the store's check first."""
    if not args or args[0].startswith("-") or args[0] in UNGATED:
        return False
    words = args[:args.index("--")] if "--" in args else args
    return not ({"--help", "-h"} & set(words))


def store_set(top: dict[str, object]) -> bool:
    """Whether a home whose loops.yaml's top-level settings are `top` has a
    store (no check of the DSN: the gate made it; no psycopg)."""
    return bool(os.environ.get(ENV_STORE, "").strip() or top.get("store"))


def home_has_store(store: Any) -> bool:
    """Whether the home of `store` (storage.store.Store) has a team store:
    a glance at loops.yaml's bytes first, so a home of files reads no
    definitions for it (`status`'s short path does not otherwise)."""
    return may_have_store(str(store.paths.loops_file)) and store_set(store.read_defs().top)


def may_have_store(loops_file: str) -> bool:
    """False only when no store can be set: LOOPCTL_STORE empty and the
    word `store` nowhere in loops.yaml (a glance at its bytes spares the
    parse); True: read the definitions to know (pg.team.of_home)."""
    if os.environ.get(ENV_STORE, "").strip():
        return True
    try:
        with open(loops_file, "rb") as handle:
            data = handle.read(MAX_DEFS_BYTES + 1)
    except OSError:
        return False  # no loops.yaml (or unreadable: the command says so)
    # Bigger than any loops.yaml: the definitions refuse it, not this glance.
    return b"store" in data or len(data) > MAX_DEFS_BYTES


def gate(args: list[str]) -> None:
    """With a store set: connect and check its schema, or raise (exit 3)."""
    if not gated(args):
        return
    from loopctl.storage import paths

    config_dir, _ = paths.roots()
    if not may_have_store(os.path.join(config_dir, "loops.yaml")):
        return
    if not os.environ.get(ENV_STORE, "").strip():
        # The word may be anywhere (a path, a prompt): the definitions (their
        # cached parse) say, before psycopg and the store's modules load.
        from loopctl.storage.store import Store

        if Store().read_defs().top.get("store") is None:
            return
    from loopctl.storage.pg.team import has_kept, keep, of_home

    team = of_home()
    if team is not None and not has_kept(team.dsn):  # the idle tick's check, kept
        # Kept, not closed: the command's state, claims and records use it
        # (storage/pg/team.take_kept), one connection for the whole process.
        keep(team.dsn, team.open_checked())
