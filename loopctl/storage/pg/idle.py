"""A store home's idle `tick` (DESIGN §21, issue 54): the file home's
summary.json exit (entry.nothing_due), read from the store's one row
`team_wake` that every state write keeps in its transaction, with this
machine's `defs_sig` and the schema's version, in one query and without the
team's state lock. Whatever it cannot prove (no row yet, another
loops.yaml, a schema this code does not know, a run in flight, the store
unreachable), the full path decides: it checks the store and says why.

The query goes through libpq itself when it can be loaded (storage/pg/
libpq.py: psycopg's import would be most of the tick), else psycopg."""

from __future__ import annotations

from loopctl.storage.pg.schema import SCHEMA

TYPE_CHECKING = False  # not `typing`: a cost of every cron tick

if TYPE_CHECKING:
    from typing import Any

QUERY = ("SELECT v.version, w.only_row, w.wake_at, w.busy, w.saved_at, m.top -> 'defs_sig' "
         f"FROM {SCHEMA}.schema_version v LEFT JOIN {SCHEMA}.team_wake w ON true "
         f"LEFT JOIN {SCHEMA}.machine_state m ON m.machine = {{}}")


def nothing_due(loops_file: str, now: float) -> bool:
    """True only when the store proves no loop needs a driver before `now`
    (the tick's horizon)."""
    from loopctl.storage import paths
    from loopctl.storage.pg.dsn import machine
    from loopctl.storage.pg.schema import CODE_VERSION

    dsn, signature = home_store(loops_file)
    if dsn is None:
        return False  # no store after all: the full path (state.json) decides
    row = read_row(dsn, machine())
    if row[0] != CODE_VERSION or row[1] is None:
        return False  # the gate says what is wrong with the schema; no row: no write yet
    quiet = paths.quiet_until(summary(row), signature, now)
    return quiet is not None and not quiet[1]  # a run in flight: a driver judges its claim


def home_store(loops_file: str) -> tuple[str | None, list[int] | None]:
    """The home's DSN (dsn.chosen) and the signature of the loops.yaml it
    was read from: LOOPCTL_STORE, else the file's `store:` line when its
    bytes show it plainly (store_line.py), else the definitions' parse (a
    thousand loops of YAML, or the import of what reads their cached copy:
    most of an idle tick)."""
    import os

    from loopctl.storage import paths
    from loopctl.storage.pg.dsn import chosen
    from loopctl.storage.pg.gate import ENV_STORE
    from loopctl.storage.pg.store_line import top_store

    if os.environ.get(ENV_STORE, "").strip():
        return chosen(None, loops_file), paths.file_signature(loops_file)
    data, signature = source(loops_file)
    found = None if data is None else top_store(data)
    if found is None:
        from loopctl.storage.store import Store

        defs = Store().read_defs()
        found, signature = defs.top.get("store"), defs.signature
    return chosen(found, loops_file), signature


def source(loops_file: str) -> tuple[bytes | None, list[int] | None]:
    """loops.yaml's bytes and signature, from one open file (as
    definitions.read_defs_source); (None, None): the definitions decide
    (no file, unreadable, bigger than any loops.yaml)."""
    import os

    from loopctl.storage.pg.gate import MAX_DEFS_BYTES

    try:
        with open(loops_file, "rb") as handle:
            st = os.fstat(handle.fileno())
            data = handle.read(MAX_DEFS_BYTES + 1)
    except OSError:
        return None, None
    if len(data) > MAX_DEFS_BYTES:
        return None, None
    return data, [st.st_mtime_ns, st.st_size, st.st_ino]


def read_row(dsn: str, here: str) -> tuple[Any, ...]:
    """(version, only_row, wake_at, busy, saved_at, defs_sig), typed as
    psycopg gives them. Over psycopg, the connection is kept for the full
    path's gate when the schema is this code's (storage/pg/team.keep)."""
    from loopctl.storage.pg.connect import connect_timeout
    from loopctl.storage.pg.libpq import NoLibpq, first_row

    try:
        return typed(first_row(dsn, connect_timeout(), QUERY.format("$1"), (here,)))
    except NoLibpq:
        pass
    from loopctl.storage.pg.schema import CODE_VERSION
    from loopctl.storage.pg.team import TeamStore, keep

    conn = TeamStore(dsn, here).connect()
    row = conn.execute(QUERY.format("%s"), (here,)).fetchone()
    if row is None or row[0] != CODE_VERSION:
        conn.close()
        return (None,) * 6
    keep(dsn, conn)
    return tuple(row)


def typed(text: list[str | None]) -> tuple[Any, ...]:
    """libpq's text row as psycopg types it (ValueError: the full path)."""
    version, only_row, wake_at, busy, saved_at, defs_sig = text
    return (int(version) if version is not None else None,
            None if only_row is None else only_row == "t",
            None if wake_at is None else float(wake_at),
            None if busy is None else busy == "t",
            None if saved_at is None else float(saved_at),
            None if defs_sig is None else numbers(defs_sig))


def numbers(text: str) -> list[int] | None:
    """A JSON list of whole numbers (jsonb's text of `defs_sig`); None: another value."""
    text = text.strip()
    if not (text.startswith("[") and text.endswith("]")):
        return None
    inner = text[1:-1].strip()
    return [int(part) for part in inner.split(",")] if inner else []


def summary(row: tuple[Any, ...]) -> dict[str, Any]:
    """The row as summary.json says the same (paths.quiet_until checks
    every value: the row is untrusted like the file)."""
    _, _, wake_at, busy, saved_at, defs_sig = row
    # NaN passes quiet_until's clock check (every comparison false): a row
    # that says it proves nothing (version None: the full path decides).
    finite = isinstance(saved_at, float) and abs(saved_at) < float("inf")
    return {"version": 2 if finite else None, "wake_at": wake_at,
            "busy": busy is not False, "saved_at": saved_at, "defs_sig": defs_sig}
