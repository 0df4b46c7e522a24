"""Waking other machines' daemons through the team store (DESIGN §21
"Waking"): a change one machine commits (a pause, a trigger, an edited
definition) is `NOTIFY loopctl_wake, '<loop>'`; each daemon `LISTEN`s on
one dedicated autocommit connection whose socket sits in its select(), so
it wakes for a pass within a second and asks the store nothing while idle.

The payload is only ever a hint for the daemon's log: anyone who may write
to the store may notify anything, so it is cut and made printable here, and
a wake only ever leads to a pass, which reads what it acts on itself.
"""

from __future__ import annotations

from typing import Any

from loopctl.storage.pg import connect as pg_connect
from loopctl.storage.pg.connect import StoreUnreachable, first_line
from loopctl.storage.pg.dsn import redact

CHANNEL = "loopctl_wake"
# A link that died without a word (a host gone, a cable pulled) is found by
# TCP keepalives, which send no query: about IDLE + COUNT * INTERVAL seconds.
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
              "keepalives_count": 3}
MAX_SHOWN = 64  # characters of a payload a log line shows


class Listener:
    """The daemon's LISTEN connection: `fileno()` for select(), `drain()`
    when it is readable."""

    def __init__(self, conn: Any, where: str) -> None:
        self.conn = conn
        self.where = where
        self.fd = int(conn.fileno())  # kept: a closed connection has none

    def fileno(self) -> int:
        return self.fd

    def drain(self) -> list[str]:
        """The payloads notified since the last drain (none: the socket had
        something else, a server's goodbye); StoreUnreachable once the link
        is gone. Never blocks: psycopg polls the socket with timeout 0."""
        try:
            payloads = [shown(n.payload) for n in self.conn.notifies(timeout=0)]
        except pg_connect.driver().Error as exc:
            raise StoreUnreachable(f"store {self.where} is unreachable: "
                                   f"{first_line(exc)}") from None
        if self.conn.closed or self.conn.broken:
            raise StoreUnreachable(f"store {self.where} closed the connection")
        return payloads

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:  # noqa: BLE001 -- closing a dead link may complain; it is gone
            pass


def listen(dsn: str) -> Listener:
    """A connection that LISTENs on CHANNEL (StoreUnreachable if not)."""
    conn = pg_connect.connect(dsn, **KEEPALIVES)
    try:
        conn.execute(f"LISTEN {CHANNEL}")
    except pg_connect.driver().Error as exc:
        conn.close()
        raise StoreUnreachable(f"store {redact(dsn)} is unreachable: "
                               f"{first_line(exc)}") from None
    return Listener(conn, redact(dsn))


def notify(conn: Any, loop: str) -> None:
    """Wake every listening daemon for `loop` (in the caller's transaction
    if one is open: delivered when it commits, dropped if it rolls back)."""
    conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, loop))


def shown(payload: str) -> str:
    """A payload as a log line may show it: printable and short."""
    text = "".join(ch if ch.isprintable() else "?" for ch in payload[:MAX_SHOWN])
    return text + ("..." if len(payload) > MAX_SHOWN else "")
