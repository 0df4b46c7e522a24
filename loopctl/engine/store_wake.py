"""Waking across machines (DESIGN §21 "Waking"): the daemon's side, and the
one call a command makes after it commits a change other machines' daemons
must act on.

In a home with a team store the daemon holds one LISTEN connection
(storage/pg/wake.py) whose socket joins its select(): a NOTIFY from any
machine wakes it for a pass within a second, and an idle daemon sends the
store nothing (TCP keepalives find a dead link). A lost connection is said
once; the daemon goes on with its heartbeat and its files, reconnects with
backoff (1 s, 2 s, ... up to 30 s), and passes once it is back, since a
notify sent meanwhile was missed. A home of files never loads psycopg or
the store's modules from here: the DSN is looked for first, cheaply.
"""

from __future__ import annotations

import os
import time

from loopctl.domain.errors import LoopctlError
from loopctl.storage.pg.gate import ENV_STORE, may_have_store
from loopctl.storage.store import Store

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

RETRY_LIMIT = 30.0
# A flood of notifies (anyone who may write to the store may send them)
# costs at most one pass per MIN_GAP; a burst is drained into one pass.
MIN_GAP = 0.2
# The store's DSN is looked at again this often: `store:` edited in
# loops.yaml moves the LISTEN to the new store without a restart.
RESOLVE_EVERY = 30.0
MAX_NAMED = 5  # loops a wake's log line names


def store_dsn(store: Store) -> str | None:
    """The home's store, or None (a home of files, decided without psycopg:
    most often by the gate's glance at loops.yaml, before any parse)."""
    if not may_have_store(str(store.paths.loops_file)):
        return None
    defs = store.read_defs()
    if not (os.environ.get(ENV_STORE, "").strip() or defs.top.get("store")):
        return None
    from loopctl.storage.pg.dsn import chosen

    return chosen(defs.top.get("store"), str(store.paths.loops_file))


def tell_others(store: Store, loop: str) -> None:
    """Wake the team's daemons for `loop`, after this command's change is
    written. Best effort: the change stands whether or not the notify
    goes out (the others see it on their next heartbeat pass anyway)."""
    try:
        dsn = store_dsn(store)
        if dsn is None:
            return
        from loopctl.storage.pg.connect import connect
        from loopctl.storage.pg.wake import notify

        conn = connect(dsn)
        try:
            notify(conn, loop)
        finally:
            conn.close()
    except Exception:  # noqa: BLE001 -- a notify never fails the command it follows
        pass


class StoreWake:
    """The daemon's LISTEN connection, kept up, and the wakes it brought."""

    def __init__(self, store: Store, log: Callable[[str], None], private: list[int]) -> None:
        self.store = store
        self.log = log
        # The daemon's descriptors a forked supervisor closes: one holding
        # this socket would keep the session (and its LISTEN) open after
        # the daemon let it go.
        self.private = private
        self.dsn: str | None = None
        self.resolved_at = -RESOLVE_EVERY
        self.listener: Any = None
        self.failures = 0
        self.retry_at = 0.0
        self.down: str | None = None  # why the link is down, said once
        self.woken: list[str] = []  # loops notified since the last pass
        self.missed = False  # (re)connected: a notify may have been missed
        self.last_wake = -MIN_GAP

    def waits(self) -> list[Any]:
        return [self.listener] if self.listener is not None else []

    def hold(self) -> float:
        """Seconds until a pending wake may start a pass (inf: none pends)."""
        if not (self.woken or self.missed):
            return float("inf")
        return max(0.0, self.last_wake + MIN_GAP - time.monotonic())

    def readable(self, ready: list[Any]) -> bool:
        """After select(): drain the notifies; True when the daemon should
        look now: a pass is due, or the link was lost (its socket is gone
        from what select() may wait on; `take` reconnects)."""
        if self.listener is not None and self.listener in ready:
            from loopctl.storage.pg.connect import StoreUnreachable

            try:
                self._note(self.listener.drain())
            except StoreUnreachable as exc:
                self._lost(exc.message)
                return True
        return self.hold() == 0.0

    def take(self) -> bool:
        """Whether the store asks for a pass now: a notify, or a link just
        made (again). Keeps the link up: (re)connects when it is time."""
        now = time.monotonic()
        if now - self.resolved_at >= RESOLVE_EVERY:
            self._resolve(now)
        if self.listener is None and self.dsn is not None and now >= self.retry_at:
            self._connect(now)
        if self.hold() > 0.0:
            return False
        if self.woken:
            self.log(f"woken by the store for {', '.join(self.woken)}")
        self.woken, self.missed, self.last_wake = [], False, now
        return True

    def close(self) -> None:
        if self.listener is not None:
            fd = self.listener.fd
            if fd in self.private:
                self.private.remove(fd)
            self.listener.close()
            self.listener = None

    def _note(self, names: list[str]) -> None:
        for name in names:
            if name not in self.woken and len(self.woken) < MAX_NAMED:
                self.woken.append(name)
            elif len(self.woken) == MAX_NAMED:
                self.woken.append("...")

    def _resolve(self, now: float) -> None:
        self.resolved_at = now
        try:
            dsn = store_dsn(self.store)
        except LoopctlError:
            dsn = None  # a bad `store:`: each pass says so itself
        if dsn != self.dsn:
            self.close()
            self.dsn, self.retry_at, self.failures = dsn, 0.0, 0

    def _connect(self, now: float) -> None:
        from loopctl.storage.pg.wake import listen

        assert self.dsn is not None
        try:
            self.listener = listen(self.dsn)
        except LoopctlError as exc:
            self.failures += 1
            self.retry_at = now + min(RETRY_LIMIT, 2.0 ** min(self.failures - 1, 16))
            if self.down is None:
                self.down = exc.message
                self.log(f"not listening for wakes: {exc.message}; waking on the heartbeat "
                         "and retrying")
            return
        self.private.append(self.listener.fd)
        self.failures, self.missed = 0, True
        self.log(f"listening for wakes on store {self.listener.where}"
                 + (" again" if self.down else ""))
        self.down = None

    def _lost(self, why: str) -> None:
        self.close()
        self.retry_at = time.monotonic()  # one try at once, then the backoff
        self.down = why
        self.log(f"not listening for wakes: {why}; waking on the heartbeat and reconnecting")
