"""The lease: which driver may fire (DESIGN §5).

The record is plain data; liveness is a pure function of it and `now`; only
`LeaseFile` does I/O, always under `lease.lock`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from loopctl.fast.data_class import asdict, fields, record
from loopctl.settings import KNOBS, knob
from loopctl.storage.paths import Paths, ensure_dir

TYPE_CHECKING = False  # not `typing`: its import is a cost of every tick

if TYPE_CHECKING:
    from typing import Any

DEFAULT_TTL = KNOBS["LOOPCTL_LEASE_TTL"][0]
LEASE_LOCK_TIMEOUT = 10.0


def ttl_from_env() -> float:
    return knob("LOOPCTL_LEASE_TTL")


@record(frozen=True)
class Lease:
    pid: int
    create_time: float
    host: str
    owner: str
    heartbeat: float
    acquired_at: float
    role: str = "tick"

    def expires_at(self, ttl: float) -> float:
        return self.heartbeat + ttl


def is_live(lease: Lease, now: float, ttl: float, host: str,
            proc_alive: Callable[[int, float], bool]) -> bool:
    """Live while the heartbeat is at most `ttl` old and, on this host, the
    pid still belongs to the process that took the lease. At exactly
    `heartbeat + ttl` it is still live; a moment later it is takeable."""
    if now > lease.expires_at(ttl):
        return False
    return lease.host != host or proc_alive(lease.pid, lease.create_time)


def _proc_alive(pid: int, create_time: float) -> bool:
    from loopctl.storage.proc_identity import alive

    return alive({"pid": pid, "ct": create_time})


class LeaseFile:
    def __init__(self, paths: Paths, role: str, ttl: float | None = None) -> None:
        self.paths = paths
        self.role = role
        self.ttl = ttl if ttl is not None else ttl_from_env()
        self.owner = os.urandom(8).hex()
        self.host = os.uname().nodename
        self.held = False

    @contextmanager
    def _lock(self) -> Iterator[None]:
        from loopctl.storage.locks import locked

        ensure_dir(self.paths.state_dir)
        with locked(self.paths.lease_lock, LEASE_LOCK_TIMEOUT,
                    "another driver is taking the lease right now"):
            yield

    def read(self) -> Lease | None:
        try:
            data = json.loads(self.paths.lease_file.read_text())
            return Lease(**{k: data[k] for k in fields(Lease) if k in data})
        except (OSError, ValueError, TypeError, KeyError):
            return None

    def acquire(self, now: float) -> Lease | None:
        """Take or renew the lease. Returns None on success, else the live holder.
        Raises BusyError when another driver holds `lease.lock` too long."""
        # imported before the lock, not while holding it
        from loopctl.storage.proc_identity import ref

        with self._lock():
            current = self.read()
            if current and current.owner != self.owner and is_live(
                    current, now, self.ttl, self.host, _proc_alive):
                self.held = False
                return current
            me = ref()
            acquired = current.acquired_at if current and current.owner == self.owner else now
            lease = Lease(pid=me["pid"], create_time=me["ct"], host=self.host,
                          owner=self.owner, heartbeat=now, acquired_at=acquired,
                          role=self.role)
            self._write(lease)
            self.held = True
            return None

    def holds(self, now: float) -> bool:
        """Whether the lease file still names this driver, live at `now`:
        checked under the store lock by a pass about to claim, since a
        driver paused (SIGSTOP, a VM freeze) since its heartbeat may have
        been taken over meanwhile."""
        current = self.read()
        return current is not None and current.owner == self.owner \
            and now <= current.expires_at(self.ttl)

    def release(self) -> None:
        if not self.held:
            return
        with self._lock():
            current = self.read()
            if current and current.owner == self.owner:
                try:
                    self.paths.lease_file.unlink()
                except OSError:
                    pass
        self.held = False

    def _write(self, lease: Lease) -> None:
        from loopctl.storage.atomic import atomic_write

        atomic_write(self.paths.lease_file, json.dumps(asdict(lease)).encode())


def describe(lease: Lease) -> dict[str, Any]:
    return asdict(lease)
