"""GitHub deliveries in the team store (DESIGN §21 "What the store holds"):
the same contract as serve's `serve-deliveries.json` (storage/serve_files.
Deliveries), shared by every machine's `serve`, so that a delivery (or
GitHub's redelivery) reaching another machine behind one load balancer is
a duplicate there too.

Each delivery is two rows of `webhook_deliveries`, keyed by its
`X-GitHub-Delivery` id and by its body's SHA-256. The once-point is their
insert: a claim inserts both (or takes back a `partial` one, or one whose
serve died mid-fire) in one transaction, and a key already there and not
free to take makes it a duplicate and writes nothing. A claim holds a
token of its own; its settle writes only rows still holding it. Bounded:
the newest MAX_KEYS keys are kept, the older pruned in the claim's
transaction. The rows are untrusted: only loop names are taken from
`fired`, and at most MAX_FIRED of them."""

from __future__ import annotations

import secrets
import threading
from typing import Any

from loopctl.storage.pg import connect as pg_connect
from loopctl.storage.pg.schema import SCHEMA

MAX_KEYS = 4000  # storage/serve_files.MAX_DELIVERIES: two keys per delivery
MAX_FIRED = 1000  # names of loops one row may say it fired
TCP_USER_TIMEOUT_MS = 30_000  # unacknowledged data for this long: the link is dead
DELIVERY_LOCK = 0x686F6F6B  # "hook": claims queue here (no deadlock between prunes)

_CLAIM = (
    f"INSERT INTO {SCHEMA}.webhook_deliveries AS d (key, state, fired, machine, token) "
    "VALUES (%s, 'flying', '{}', %s, %s) ON CONFLICT (key) DO UPDATE SET "
    "state = 'flying', machine = EXCLUDED.machine, token = EXCLUDED.token, at = now(), "
    "seq = DEFAULT WHERE d.state = 'partial' OR (d.state = 'flying' AND "
    "d.at < now() - make_interval(secs => %s)) "
    "RETURNING (SELECT array_agg(left(f, 101)) FROM "
    f"(SELECT unnest(d.fired[1:{MAX_FIRED}])) AS names(f))"
)
_PRUNE = (
    f"DELETE FROM {SCHEMA}.webhook_deliveries WHERE seq <= (SELECT seq FROM "
    f"{SCHEMA}.webhook_deliveries ORDER BY seq DESC OFFSET %s LIMIT 1)"
)
_SETTLE = (
    f"UPDATE {SCHEMA}.webhook_deliveries SET state = %s, fired = %s, at = now(), "
    "seq = DEFAULT WHERE key = ANY(%s) AND token = %s"
)


class TeamDeliveries:
    """`Deliveries` (claim, settle) kept in the team store. One connection
    of its own, used by one request thread at a time. A store that cannot
    be reached raises StoreUnreachable from `claim` (the caller answers 503
    and fires nothing); `settle` never raises (the delivery was answered:
    a row left `flying` is taken again after `stale` seconds)."""

    def __init__(self, dsn: str, machine: str, stale: float) -> None:
        self.dsn, self.machine, self.stale = dsn, machine, stale
        self.lock = threading.Lock()
        self.conn: Any = None
        self.tokens: dict[str, str] = {}  # key -> the token of this serve's claim
        self.unsettled: str | None = None  # why the last settle failed (serve logs it)

    def _connection(self) -> Any:
        if self.conn is not None and (self.conn.closed or self.conn.broken):
            self.close()
        if self.conn is None:
            from loopctl.storage.pg.team import TeamStore
            from loopctl.storage.pg.wake import KEEPALIVES

            # Kept for serve's life: a link that dies without a word must not
            # hold the request (and the lock every delivery queues on) for the
            # kernel's quarter of an hour of retransmits.
            self.conn = TeamStore(self.dsn, self.machine).open_checked(
                **KEEPALIVES, tcp_user_timeout=TCP_USER_TIMEOUT_MS)
        return self.conn

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # a dead link: nothing to say to it
                pass

    def claim(self, keys: list[str]) -> list[str] | None:
        """None: a key was settled done or is in flight on some machine (a
        duplicate), and nothing was written. Else the loops an earlier
        attempt fired (to skip); the keys are this serve's until `settle`."""
        token = secrets.token_hex(8)
        with self.lock:
            kept = self.conn is not None
            try:
                fired = self._claim(sorted(keys), token)
            except pg_connect.driver().Error as exc:
                self.close()
                if not kept:
                    raise self._down(exc) from None
                try:  # a kept link the server dropped since (a restart): once more, afresh
                    fired = self._claim(sorted(keys), token)
                except pg_connect.driver().Error as again:
                    self.close()
                    raise self._down(again) from None
            if fired is not None:
                self.tokens.update(dict.fromkeys(keys, token))
            return fired

    def _claim(self, keys: list[str], token: str) -> list[str] | None:
        conn = self._connection()
        earlier: set[str] = set()
        duplicate = False
        with conn.transaction() as tx:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (DELIVERY_LOCK,))
            for key in keys:  # in one order: id, then the body's digest
                row = conn.execute(_CLAIM, (key, self.machine, token, self.stale)).fetchone()
                if row is None:  # done, or another serve's in flight: write nothing
                    duplicate = True
                    raise pg_connect.driver().Rollback(tx)
                earlier.update(n for n in row[0] or [] if isinstance(n, str))
            conn.execute(_PRUNE, (MAX_KEYS,))
        return None if duplicate else sorted(earlier)

    def settle(self, keys: list[str], fired: list[str] | None) -> None:
        """Done (`fired` None) or partial with the loops fired so far."""
        with self.lock:
            tokens = {self.tokens.pop(key, "") for key in keys}
            state, names = ("done", []) if fired is None else ("partial", sorted(fired))
            try:
                conn = self._connection()
                for token in tokens - {""}:
                    conn.execute(_SETTLE, (state, names, keys, token))
                self.unsettled = None
            except (pg_connect.driver().Error, pg_connect.StoreUnreachable) as exc:
                self.close()
                self.unsettled = pg_connect.first_line(exc)

    def _down(self, exc: Exception) -> Exception:
        from loopctl.storage.pg.dsn import redact

        return pg_connect.StoreUnreachable(
            f"store {redact(self.dsn)} is unreachable: {pg_connect.first_line(exc)}")

