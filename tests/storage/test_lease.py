"""The lease (DESIGN §5): pure liveness at the boundary with a fake clock, and
the real lease file under the test's LOOPCTL_HOME."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from loopctl.domain.errors import UsageError
from loopctl.fast.data_class import asdict, replace
from loopctl.storage import paths
from loopctl.storage.lease import DEFAULT_TTL, Lease, LeaseFile, is_live, ttl_from_env

HOST = "host-a"
HEARTBEAT = 1_000_000.0
TTL = 90.0
HOLDER = Lease(pid=4242, create_time=1234.5, host=HOST, owner="tok-a",
               heartbeat=HEARTBEAT, acquired_at=HEARTBEAT - 500)


def running(pid: int, create_time: float) -> bool:
    """A fake process table holding only the lease holder, as it was created."""
    return (pid, create_time) == (HOLDER.pid, HOLDER.create_time)


def gone(pid: int, create_time: float) -> bool:
    return False


def never_asked(pid: int, create_time: float) -> bool:
    raise AssertionError("a lease from another host cannot be checked by pid")


# -- pure liveness ------------------------------------------------------------


def test_live_while_the_heartbeat_is_fresh() -> None:
    assert is_live(HOLDER, HEARTBEAT, TTL, HOST, running)
    assert is_live(HOLDER, HEARTBEAT + TTL / 2, TTL, HOST, running)


def test_live_at_exactly_heartbeat_plus_ttl() -> None:
    assert is_live(HOLDER, HEARTBEAT + TTL, TTL, HOST, running)


def test_not_live_just_after_heartbeat_plus_ttl() -> None:
    assert not is_live(HOLDER, HEARTBEAT + TTL + 0.001, TTL, HOST, running)


def test_expires_at_is_heartbeat_plus_ttl() -> None:
    assert HOLDER.expires_at(TTL) == HEARTBEAT + TTL


def test_dead_pid_on_the_same_host_is_taken_at_once() -> None:
    assert not is_live(HOLDER, HEARTBEAT, TTL, HOST, gone)


def test_reused_pid_on_the_same_host_is_taken_at_once() -> None:
    # Same pid, different create time: `running` only knows the original.
    reused = replace(HOLDER, create_time=HOLDER.create_time + 3600)
    assert not is_live(reused, HEARTBEAT, TTL, HOST, running)


def test_other_host_only_the_heartbeat_counts() -> None:
    other = replace(HOLDER, host="host-b")
    assert is_live(other, HEARTBEAT + TTL, TTL, HOST, never_asked)
    assert not is_live(other, HEARTBEAT + TTL + 0.001, TTL, HOST, never_asked)


def test_live_pid_with_a_stale_heartbeat_is_taken_after_the_ttl() -> None:
    assert not is_live(HOLDER, HEARTBEAT + TTL + 1, TTL, HOST, running)


def test_shorter_ttl_moves_the_boundary() -> None:
    assert is_live(HOLDER, HEARTBEAT + 3, 3.0, HOST, running)
    assert not is_live(HOLDER, HEARTBEAT + 3.001, 3.0, HOST, running)


@pytest.mark.parametrize(("raw", "ttl"),
                         [(None, DEFAULT_TTL), ("", DEFAULT_TTL), ("5", 5.0), ("2.5", 2.5)])
def test_ttl_from_env(monkeypatch: pytest.MonkeyPatch, raw: str | None, ttl: float) -> None:
    if raw is not None:
        monkeypatch.setenv("LOOPCTL_LEASE_TTL", raw)
    assert ttl_from_env() == ttl


@pytest.mark.parametrize("raw", ["0", "-1", "soon", "nan", "inf", "1e300"])
def test_a_bad_ttl_is_an_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch,
                                                     raw: str) -> None:
    # A typo in a unit file must not silently give a 90 s lease.
    monkeypatch.setenv("LOOPCTL_LEASE_TTL", raw)
    with pytest.raises(UsageError, match="LOOPCTL_LEASE_TTL"):
        ttl_from_env()


# -- the real lease file -------------------------------------------------------


def write_lease(lease: Lease) -> Path:
    where = paths.resolve()
    paths.ensure_dir(where.state_dir)
    where.lease_file.write_text(json.dumps(asdict(lease)))
    return where.lease_file


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: the pid no longer names a process
    return child.pid


def test_lease_file_lives_under_loopctl_home(home: Path) -> None:
    assert paths.resolve().lease_file == home / "state" / "lease.json"


def test_lease_file_acquire_block_release_then_acquire(home: Path) -> None:
    now = 5_000.0
    first = LeaseFile(paths.resolve(), "daemon", ttl=TTL)
    second = LeaseFile(paths.resolve(), "tick", ttl=TTL)
    assert first.acquire(now) is None
    assert first.held

    holder = second.acquire(now + 10)
    assert holder is not None
    assert holder.owner == first.owner
    assert holder.pid == os.getpid()
    assert holder.role == "daemon"
    assert not second.held

    first.release()
    assert not paths.resolve().lease_file.exists()
    assert second.acquire(now + 20) is None
    assert second.held
    current = second.read()
    assert current is not None and current.owner == second.owner


def test_lease_file_record_has_the_documented_fields(home: Path) -> None:
    lease = LeaseFile(paths.resolve(), "tick", ttl=TTL)
    assert lease.acquire(7_000.0) is None
    data = json.loads(paths.resolve().lease_file.read_text())
    assert {"pid", "create_time", "host", "owner", "heartbeat", "acquired_at"} <= set(data)
    assert data["pid"] == os.getpid()
    assert data["create_time"] == pytest.approx(psutil.Process().create_time(), abs=0.05)
    assert data["host"] == socket.gethostname()
    assert data["heartbeat"] == data["acquired_at"] == 7_000.0
    assert (paths.resolve().lease_file.stat().st_mode & 0o777) == 0o600


def test_renewal_keeps_acquired_at_and_moves_the_heartbeat(home: Path) -> None:
    lease = LeaseFile(paths.resolve(), "daemon", ttl=TTL)
    lease.acquire(1_000.0)
    lease.acquire(1_030.0)
    current = lease.read()
    assert current is not None
    assert (current.acquired_at, current.heartbeat) == (1_000.0, 1_030.0)


def test_release_by_a_non_holder_leaves_the_lease(home: Path) -> None:
    holder = LeaseFile(paths.resolve(), "daemon", ttl=TTL)
    other = LeaseFile(paths.resolve(), "tick", ttl=TTL)
    holder.acquire(100.0)
    other.acquire(101.0)
    other.release()
    current = holder.read()
    assert current is not None and current.owner == holder.owner


def test_lease_naming_a_dead_pid_is_taken_over_at_once(home: Path) -> None:
    now = 9_000.0
    write_lease(Lease(pid=dead_pid(), create_time=1.0, host=socket.gethostname(),
                      owner="dead-owner", heartbeat=now, acquired_at=now))
    taker = LeaseFile(paths.resolve(), "tick", ttl=TTL)
    assert taker.acquire(now + 1) is None
    current = taker.read()
    assert current is not None and current.owner == taker.owner


def test_lease_naming_a_reused_pid_is_taken_over_at_once(home: Path) -> None:
    # Our own pid, but a create time that is not ours: the holder is gone and
    # the pid now belongs to someone else.
    now = 9_000.0
    me = psutil.Process()
    write_lease(Lease(pid=me.pid, create_time=me.create_time() - 1000, host=socket.gethostname(),
                      owner="old-owner", heartbeat=now, acquired_at=now))
    taker = LeaseFile(paths.resolve(), "tick", ttl=TTL)
    assert taker.acquire(now + 1) is None


def test_lease_from_another_host_waits_for_the_ttl(home: Path) -> None:
    now = 9_000.0
    write_lease(Lease(pid=1, create_time=1.0, host="elsewhere.invalid", owner="remote",
                      heartbeat=now, acquired_at=now))
    taker = LeaseFile(paths.resolve(), "tick", ttl=TTL)
    holder = taker.acquire(now + TTL)
    assert holder is not None and holder.owner == "remote"
    assert taker.acquire(now + TTL + 0.001) is None


def test_unreadable_lease_file_is_taken(home: Path) -> None:
    where = paths.resolve()
    paths.ensure_dir(where.state_dir)
    where.lease_file.write_text("{not json")
    taker = LeaseFile(where, "tick", ttl=TTL)
    assert taker.acquire(1.0) is None
