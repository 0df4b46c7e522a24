"""Loop state in the team store (DESIGN §21 "What lives where"): one row
per loop in `loop_state`, shared by every machine, and each machine's own
top-level keys (`defs_sig`: the loops.yaml *this* machine reconciled) in a
row of `machine_state`.

A read-modify-write runs in one transaction holding one cluster-wide
advisory lock (schema.STATE_LOCK), taken after the machine's local file
lock: drivers on every machine then serialize exactly as local processes
do on state.json. A write sends only the entries that changed (and deletes
the removed ones), and each changed loop is announced on the channel
`loopctl_wake` in the same transaction, so a listener hears of it only once
it is committed.

The rows are untrusted input like state.json: the Store passes every entry
through domain.state.repair before anyone uses it."""

from __future__ import annotations

import json
from typing import Any

from loopctl.storage.pg import connect as pg_connect
from loopctl.storage.pg.dsn import redact
from loopctl.storage.pg.schema import SCHEMA, STATE_LOCK

WAKE_CHANNEL = "loopctl_wake"
LOCK_WAIT_S = 60  # store.LOCK_TIMEOUT: waiting for the team's lock as for the local one
# The top-level keys that describe this machine's files, not the team's loops.
MACHINE_KEYS = ("defs_sig",)
# The top-level keys that are the team's: the account holds (DESIGN §18).
TEAM_KEYS = ("accounts",)


def canonical(value: Any) -> str:
    """The one text of a JSON value, to tell a changed entry from the one read."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


class SharedState:
    """One home's view of the shared state: a connection, opened on first
    use, and the transaction of the current store lock."""

    def __init__(self, dsn: str, machine: str) -> None:
        self.dsn, self.machine = dsn, machine
        self.conn: Any = None
        self.in_tx = False
        self.tx_conn: Any = None  # the connection the store lock's transaction began on
        self.seen: dict[str, str] = {}  # loop -> canonical(entry) as read in this transaction
        self.seen_top: str | None = None
        self.seen_team: dict[str, str] = {}
        self.seen_wake: str | None = None  # the team_wake row as read: [wake_at, busy]

    def _connection(self) -> Any:
        """The process's connection, kept from one store lock to the next
        (a run takes three); a broken one (a server restarted) is replaced."""
        if self.conn is not None and (self.conn.closed or self.conn.broken):
            self.close()
        if self.conn is None:
            from loopctl.storage.pg.team import TeamStore, take_kept

            self.conn = take_kept(self.dsn) or TeamStore(self.dsn, self.machine).open_checked()
        return self.conn

    def reader(self) -> Any:
        """The process's connection for a read outside any store lock (the
        views: history, logs, ls, digest), the same one the lock's writes use:
        no second connection per command. It stays open for the next lock."""
        return self._first("SELECT 1") if not self.in_tx else self._connection()

    def _first(self, sql: str) -> Any:
        """The connection, after `sql` ran on it: a kept one the server
        dropped since (a restart, a cut link) is replaced once, so the
        failure said is the one connecting now meets."""
        conn = self._connection()
        try:
            conn.execute(sql)
            return conn
        except pg_connect.driver().Error:
            self.close()
        conn = self._connection()
        self._run(conn, sql)
        return conn

    def begin(self) -> None:
        """The transaction of a store lock: every machine's writers queue here."""
        if self.in_tx:
            return
        conn = self._first("BEGIN")
        self.in_tx, self.tx_conn = True, conn
        # A holder that stops answering (a machine frozen, a link cut) loses
        # its session, and with it the lock, once its claims could be stale
        # too: the team is not held up by it, and what it had not committed
        # is rolled back. A waiter gives up as a local lock's does.
        from loopctl.settings import knob

        limits = (f"{int(knob('LOOPCTL_STORE_STALE') * 1000)}ms", f"{int(LOCK_WAIT_S)}s")
        self._run(conn, "SELECT set_config('idle_in_transaction_session_timeout', %s, true), "
                  "set_config('lock_timeout', %s, true)", limits)
        self._run(conn, "SELECT pg_advisory_xact_lock(%s)", (STATE_LOCK,))

    def end(self) -> None:
        """Commit what the lock's holder wrote (a failed transaction is
        rolled back by the server: COMMIT of an aborted one is a ROLLBACK)."""
        if not self.in_tx:
            return
        self.in_tx = False
        self.seen, self.seen_top, self.seen_team, self.seen_wake = {}, None, {}, None
        began, self.tx_conn = self.tx_conn, None
        if self.conn is None or self.conn is not began:
            # The link was lost inside the lock (_failed closed it, maybe
            # connected again): the server rolled back; a COMMIT now would
            # commit nothing and say nothing.
            raise pg_connect.StoreUnreachable(
                f"store {redact(self.dsn)} is unreachable: the link was lost before the "
                "commit; nothing of this change was written")
        try:
            self._run(self.conn, "COMMIT")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # closing a dead link: nothing was committed anyway
                pass

    def read(self) -> tuple[dict[str, Any], dict[Any, Any]]:
        """(this machine's top-level keys, {loop: entry as stored})."""
        conn = self.conn if self.in_tx else self._first("SELECT 1")
        rows = self._run(conn, f"SELECT loop, entry FROM {SCHEMA}.loop_state").fetchall()
        top = self._run(conn, f"SELECT (SELECT top FROM {SCHEMA}.machine_state WHERE "
                        f"machine = %s), (SELECT json_build_array(wake_at, busy) FROM "
                        f"{SCHEMA}.team_wake)", (self.machine,)).fetchone()
        team = {row[0]: row[1] for row in self._run(
            conn, f"SELECT key, value FROM {SCHEMA}.team_state").fetchall()
            if row[0] in TEAM_KEYS}
        loops = {row[0]: row[1] for row in rows}
        if self.in_tx:
            self.seen = {name: canonical(entry) for name, entry in loops.items()}
            self.seen_top = canonical(top[0]) if top and top[0] is not None else None
            self.seen_wake = canonical(top[1]) if top and top[1] is not None else None
            self.seen_team = {key: canonical(value) for key, value in team.items()}
        mine = top[0] if top and isinstance(top[0], dict) else {}
        return {**{k: mine[k] for k in MACHINE_KEYS if k in mine}, **team}, loops

    def write(self, top: dict[str, Any], loops: dict[str, Any],
              wake: tuple[float | None, bool] = (0.0, True)) -> None:
        """Upsert the entries that differ from the ones read, delete the
        ones gone, and announce each changed loop; in the lock's
        transaction (begun here for a writer that did not read). `wake`:
        the team's next wake and whether a run is in flight, computed from
        every entry (domain.state.summarize), kept in the same transaction."""
        alone = not self.in_tx  # a writer outside the store lock commits at once
        if alone:
            self.begin()
            self.read()
        # Every text first: nothing is sent unless the whole state encodes.
        texts = {name: canonical(entry) for name, entry in loops.items()}
        changed = {name: text for name, text in texts.items() if self.seen.get(name) != text}
        gone = [name for name in self.seen if name not in texts]
        mine = canonical({k: top[k] for k in MACHINE_KEYS if k in top})
        self._many(f"INSERT INTO {SCHEMA}.loop_state (loop, entry, updated_by) "
                   "VALUES (%s, %s::jsonb, %s) ON CONFLICT (loop) DO UPDATE SET "
                   "entry = EXCLUDED.entry, updated_at = now(), "
                   "updated_by = EXCLUDED.updated_by",
                   [(name, text, self.machine) for name, text in changed.items()])
        self._many(f"DELETE FROM {SCHEMA}.loop_state WHERE loop = %s", [(n,) for n in gone])
        self._wake([*changed, *gone])
        self._write_team(top)
        self._write_wake(wake, bool(changed or gone))
        if mine != self.seen_top:
            self._run(self.conn, f"INSERT INTO {SCHEMA}.machine_state (machine, top) "
                      "VALUES (%s, %s::jsonb) ON CONFLICT (machine) DO UPDATE SET "
                      "top = EXCLUDED.top, updated_at = now()", (self.machine, mine))
        self.seen, self.seen_top = texts, mine
        if alone:
            self.end()

    def _write_team(self, top: dict[str, Any]) -> None:
        """The team's top-level keys that changed (an account hold)."""
        texts = {key: canonical(top[key]) for key in TEAM_KEYS if top.get(key) is not None}
        self._many(f"INSERT INTO {SCHEMA}.team_state (key, value, updated_by) VALUES "
                   "(%s, %s::jsonb, %s) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, "
                   "updated_at = now(), updated_by = EXCLUDED.updated_by",
                   [(key, text, self.machine) for key, text in texts.items()
                    if self.seen_team.get(key) != text])
        self._many(f"DELETE FROM {SCHEMA}.team_state WHERE key = %s",
                   [(key,) for key in self.seen_team if key not in texts])
        self.seen_team = texts

    def _write_wake(self, wake: tuple[float | None, bool], changed: bool) -> None:
        """The team_wake row, when an entry changed or it says otherwise:
        in this transaction, so no machine's idle `tick` (storage/pg/idle)
        can read a wake later than what was just committed made due."""
        text = canonical([wake[0], wake[1]])
        if not changed and text == self.seen_wake:
            return
        from loopctl import clock

        self._run(self.conn, f"INSERT INTO {SCHEMA}.team_wake (wake_at, busy, saved_at) "
                  "VALUES (%s, %s, %s) ON CONFLICT (only_row) DO UPDATE SET "
                  "wake_at = EXCLUDED.wake_at, busy = EXCLUDED.busy, "
                  "saved_at = EXCLUDED.saved_at, version = team_wake.version + 1",
                  (wake[0], wake[1], clock.now()))
        self.seen_wake = text

    def transaction_conn(self) -> Any:
        """The lock's connection, for claims taken in the same transaction."""
        return self.conn if self.in_tx else None

    def _wake(self, names: list[str]) -> None:
        """NOTIFY each changed loop, committed with the change. Best effort,
        in a savepoint: a role that may not notify still writes its state
        (the others find the change on their next pass)."""
        if not names:
            return
        conn = self._live()
        try:
            with conn.transaction(), conn.cursor() as cursor:
                cursor.executemany("SELECT pg_notify(%s, %s)", [(WAKE_CHANNEL, n) for n in names])
        except pg_connect.driver().Error as exc:
            if conn.broken:
                raise self._failed(exc) from None

    def _many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        """One statement for many rows, pipelined (10,000 loops: one round trip)."""
        if not rows:
            return
        conn = self._live()
        try:
            with conn.cursor() as cursor:
                cursor.executemany(sql, rows)
        except pg_connect.driver().Error as exc:
            raise self._failed(exc) from None

    def _run(self, conn: Any, sql: str, params: tuple[Any, ...] = ()) -> Any:
        """A statement; a lost link is the store being unreachable (exit 3):
        the caller's lock then ends without committing anything."""
        try:
            return self._live(conn).execute(sql, params)
        except pg_connect.driver().Error as exc:
            raise self._failed(exc) from None

    def _live(self, conn: Any = None) -> Any:
        """`conn` (else the lock's); none: the link was lost earlier in this
        lock (and said then), which is the store unreachable, not a crash."""
        conn = conn if conn is not None else self.conn
        if conn is None:
            raise pg_connect.StoreUnreachable(f"store {redact(self.dsn)} is unreachable: "
                                              "the connection was lost")
        return conn

    def _failed(self, exc: Exception) -> Exception:
        """The one line for a statement that failed. A link found dead is
        said as connecting meets it now (`store ... is unreachable: ...`),
        so a daemon that says a failure once says this one once, whether a
        pass lost its link mid-way or found it gone."""
        if self.conn is not None and (self.conn.closed or self.conn.broken):
            self.close()
            try:
                self._connection()
            except pg_connect.StoreUnreachable as down:
                return down
        return pg_connect.StoreUnreachable(
            f"store {redact(self.dsn)} is unreachable: {pg_connect.first_line(exc)}")
