"""Fencing a run on the team store (DESIGN §21). While the agent works, its
supervisor renews the run's claim every LOOPCTL_STORE_RENEW seconds (10); a
claim not renewed for LOOPCTL_STORE_STALE (60) is stale, and its slot may be
given to another machine. So a supervisor that cannot renew kills its agent
one renewal period before its claim goes stale: no slot ever has two bodies
running.

Two threads: one renews (and may block on a dead link for as long as the
network makes it), the other only watches the clock, so the kill never waits
on I/O. The kill is SIGKILL to the agent's process group (no signal to the
supervisor, whose wait may have ended meanwhile); the wait step then sweeps
whatever left the group, as after any run."""

from __future__ import annotations

import os
import signal
import threading
import time

from loopctl.settings import knob

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any


class Fence:
    def __init__(self, dsn: str, loop: str, run_id: str, agent_group: int,
                 log: str | None = None) -> None:
        self.dsn, self.loop, self.run_id = dsn, loop, run_id
        self.log = log  # sent with each renewal as it grows (storage/pg/live_tail)
        self.log_sent: int | None = None  # where the store's tail ends, as last told
        self.agent_group = agent_group
        self.renew_s = knob("LOOPCTL_STORE_RENEW")
        self.stale_s = knob("LOOPCTL_STORE_STALE")
        self.last_ok = time.monotonic()
        self.fenced = False
        self.revoked = False  # the store said the claim is no longer this run's
        self.kill_by: str | None = None  # `stop --kill` asked on this machine (DESIGN §21)
        self._stop = threading.Event()

    @property
    def request_note(self) -> str:
        return (f"stopped by `loopctl stop --kill` on machine {self.kill_by} "
                "(through the team store)")

    @property
    def note(self) -> str:
        if self.revoked:
            return ("killed: the claim went stale or was recorded lost in the team store "
                    f"(not renewed for {self.stale_s:g}s); another machine may run the slot")
        return (f"killed: the claim could not be renewed in the team store for "
                f"{self.stale_s - self.renew_s:g}s (stale at {self.stale_s:g}s)")

    def start(self) -> None:
        for target in (self._renew, self._watch):
            threading.Thread(target=target, daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _renew(self) -> None:
        from loopctl.storage.pg.claims import renew
        from loopctl.storage.pg.connect import connect

        conn: Any = None
        while not self._stop.wait(self.renew_s):
            try:
                conn = conn or connect(self.dsn)
                renewal = self._renewal(conn, renew)
            except Exception:  # any failure is a missed renewal; the watcher decides
                self.log_sent = None  # its tail may or may not have landed: resend whole
                _close(conn)
                conn = None
                continue
            if not renewal.held:  # recorded lost, or stale: another machine may run the slot
                self.revoked = True
                self._kill()
                break
            if renewal.kill_by is not None and self.kill_by is None:
                self._stop_as_asked(renewal.kill_by)
            self.last_ok = time.monotonic()
        _close(conn)

    def _renewal(self, conn: Any, renew: Any) -> Any:
        """The claim renewed, with what the run's log gained since the last
        renewal (nothing when it did not change)."""
        from loopctl.storage.pg.live_tail import next_update, renew_with_tail

        update = next_update(self.log, self.log_sent) if self.log else None
        if update is None:
            return renew(conn, self.loop, self.run_id, self.stale_s)
        renewal, landed = renew_with_tail(conn, self.loop, self.run_id, self.stale_s, update)
        self.log_sent = update.size if landed else None
        return renewal

    def _watch(self) -> None:
        limit = max(self.stale_s - self.renew_s, self.renew_s / 2)
        step = min(self.renew_s, 1.0) / 2
        while not self._stop.wait(step):
            if time.monotonic() - self.last_ok >= limit and not self._stop.is_set():
                self._kill()
                return

    def _stop_as_asked(self, machine: str) -> None:
        """What a local `stop --kill` does: SIGTERM to this supervisor, whose
        wait then kills the agent's tree and records the run `killed`. The
        name is the store's (untrusted): printable, bounded, for the note."""
        self.kill_by = "".join(c for c in machine[:100] if c.isprintable()) or "?"
        os.kill(os.getpid(), signal.SIGTERM)

    def _kill(self) -> None:
        self.fenced = True
        try:
            os.killpg(self.agent_group, signal.SIGKILL)
        except OSError:  # it ended meanwhile
            pass


def _close(conn: Any) -> None:
    if conn is not None:
        try:
            conn.close()
        except Exception:
            pass


def fence_for(store: Any, loop: str, run: dict[str, Any], agent: int) -> Fence | None:
    """A started fence for a run the team store granted (claim_fires marks
    it with the machine); None for a home of files."""
    if not run.get("machine"):
        return None
    from loopctl.storage.pg.dsn import chosen

    dsn = chosen(store.read_defs().top.get("store"), str(store.paths.loops_file))
    if dsn is None:
        return None
    fence = Fence(dsn, loop, str(run["run_id"]), agent,
                  str(store.paths.run_log(loop, str(run["run_id"]))))
    fence.start()
    return fence
