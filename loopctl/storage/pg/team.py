"""A home's team store, chosen and checked: the one door every command
goes through before it acts on a home that has a store (DESIGN §21).

With a store set, a command first connects and checks the schema; any
failure (unreachable, psycopg missing, no schema, a schema older or newer
than this code) stops the command with one line and exit 3 before it reads
or writes anything: nothing fires and nothing is written on a store whose
check failed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loopctl.storage.pg import connect as pg_connect
from loopctl.storage.pg import schema
from loopctl.storage.pg.dsn import chosen, machine, redact


@dataclass
class TeamStore:
    dsn: str
    machine: str = field(default_factory=machine)

    @property
    def shown(self) -> str:
        return redact(self.dsn)

    def connect(self) -> Any:
        return pg_connect.connect(self.dsn)

    def open_checked(self) -> Any:
        """A connection to a store whose schema is exactly this code's."""
        conn = self.connect()
        try:
            schema.check(conn, self.shown)
        except pg_connect.driver().Error as exc:  # the link lost after connecting
            conn.close()
            raise pg_connect.StoreUnreachable(
                f"store {self.shown} is unreachable: {pg_connect.first_line(exc)}") from None
        except BaseException:
            conn.close()
            raise
        return conn


def of_home(paths: Any = None) -> TeamStore | None:
    """The home's store (LOOPCTL_STORE, else loops.yaml's `store:`); None
    for a home of files only."""
    from loopctl.storage.pg.gate import may_have_store
    from loopctl.storage.store import Store

    store = Store(paths)
    if not may_have_store(str(store.paths.loops_file)):
        return None
    dsn = chosen(store.read_defs().top.get("store"), str(store.paths.loops_file))
    return TeamStore(dsn) if dsn else None

