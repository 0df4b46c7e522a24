"""Whether anything fires what the server triggers: `serve` accepts
triggers beside cron ticks or a daemon, and when neither runs the answer
and the page say so (a trigger then waits for a driver)."""

from __future__ import annotations

import threading
import time

from loopctl import clock
from loopctl.storage.store import Store

CACHE_S = 10.0  # `crontab -l` is a process: asked at most this often
NO_DRIVER = ("no driver is running: triggered and scheduled fires wait until one runs "
             "(`loopctl cron install`, or `loopctl daemon --serve ADDR` instead of serve)")


class DriverWatch:
    def __init__(self, in_daemon: bool) -> None:
        self.in_daemon = in_daemon
        self.lock = threading.Lock()
        self.checked = -CACHE_S
        self.note: str | None = None

    def missing(self, store: Store) -> str | None:
        """None when a daemon holds the lease or cron runs the crontab line;
        else what to do."""
        if self.in_daemon:
            return None
        with self.lock:
            if time.monotonic() - self.checked < CACHE_S:
                return self.note
            self.note = None if _driver_runs(store) else NO_DRIVER
            self.checked = time.monotonic()
            return self.note


def _driver_runs(store: Store) -> bool:
    from loopctl.commands.doctor_drivers import cron_driver
    from loopctl.engine import procs
    from loopctl.storage.lease import LeaseFile, is_live

    leases = LeaseFile(store.paths, "serve")
    holder = leases.read()
    if holder is not None and holder.role == "daemon" and is_live(
            holder, clock.now(), leases.ttl, leases.host,
            lambda pid, ct: procs.alive({"pid": pid, "ct": ct})):
        return True
    cron = cron_driver(store)
    return cron.fires()
