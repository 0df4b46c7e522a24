"""A home's team store, chosen and checked: the one door every command
goes through before it acts on a home that has a store (DESIGN §21).

With a store set, a command first connects and checks the schema; any
failure (unreachable, psycopg missing, no schema, a schema older or newer
than this code) stops the command with one line and exit 3 before it reads
or writes anything: nothing fires and nothing is written on a store whose
check failed."""

from __future__ import annotations

import os
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

    def connect(self, **options: Any) -> Any:
        return pg_connect.connect(self.dsn, **options)

    def open_checked(self, **options: Any) -> Any:
        """A connection to a store whose schema is exactly this code's
        (`options`: more libpq parameters)."""
        conn = self.connect(**options)
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


# The gate's checked connection, per DSN, with the pid that opened it: the
# command's shared state takes it instead of connecting again (one
# connection per process). A process forked from its opener (a supervisor)
# never uses it: two processes on one socket would interleave their bytes.
_KEPT: dict[str, tuple[int, Any]] = {}
# Connections a forked child found kept: held, never used nor closed (closing
# would end the parent's session on the socket they share), never collected.
_INHERITED: list[Any] = []


def keep(dsn: str, conn: Any) -> None:
    """Keep the checked connection `conn` for this process's shared state."""
    _KEPT[dsn] = (os.getpid(), conn)


def has_kept(dsn: str) -> bool:
    """Whether this process holds a checked connection to `dsn`, unused."""
    found = _KEPT.get(dsn)
    return found is not None and found[0] == os.getpid() and not found[1].closed


def take_kept(dsn: str) -> Any | None:
    """The kept connection to `dsn`, now the caller's (None: connect): one
    this process opened, still open and idle, taken once."""
    found = _KEPT.pop(dsn, None)
    if found is None:
        return None
    pid, conn = found
    if pid != os.getpid():
        _INHERITED.append(conn)
        return None
    if conn.closed or conn.broken or conn.info.transaction_status != IDLE:
        conn.close()
        return None
    return conn


IDLE = 0  # psycopg.pq.TransactionStatus.IDLE, without importing psycopg here


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

