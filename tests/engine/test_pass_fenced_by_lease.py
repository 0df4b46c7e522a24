"""A driver pass is fenced by its lease (loopctl/engine/firing.driver_pass).

A daemon may be paused anywhere (SIGSTOP, a VM freeze, a long GC) after it
renewed its lease and took the time, and before its pass takes the store
lock. Meanwhile its heartbeat goes stale and a tick takes over and fires.
Once continued, its pass must decide afresh under the lock: with the time
taken there, and only while the lease file still names it, live.
"""

from __future__ import annotations

from conftest import CLI
from loopctl import clock
from loopctl.engine.firing import driver_pass, wait_for_children
from loopctl.storage.lease import LeaseFile
from loopctl.storage.store import Store

TTL = 2.0


def due_loop(cli: CLI) -> Store:
    cli("start", "p", "--name", "steady", "--every", "1h", "--command", "true", check=0)
    return Store()


def iterations(cli: CLI) -> int:
    return int(cli.state()["loops"]["steady"]["iterations"])


def test_a_pass_whose_lease_was_taken_over_while_it_was_paused_claims_nothing(
        cli: CLI) -> None:
    store = due_loop(cli)
    paused_at = clock.now() - 10 * TTL
    daemon = LeaseFile(store.paths, "daemon", ttl=TTL)
    assert daemon.acquire(paused_at) is None
    tick = LeaseFile(store.paths, "tick", ttl=TTL)
    assert tick.acquire(clock.now()) is None  # the daemon's heartbeat is stale
    report = driver_pass(store, paused_at, lease=daemon)
    assert (report.fired, report.lease_lost, daemon.held) == ([], True, False)
    assert iterations(cli) == 0
    report = driver_pass(store, clock.now(), lease=tick)  # the holder fires
    wait_for_children(report.children)
    assert [f["loop"] for f in report.fired] == ["steady"]


def test_a_pass_on_its_own_stale_lease_claims_nothing(cli: CLI) -> None:
    store = due_loop(cli)
    paused_at = clock.now() - 10 * TTL
    daemon = LeaseFile(store.paths, "daemon", ttl=TTL)
    assert daemon.acquire(paused_at) is None
    report = driver_pass(store, paused_at, lease=daemon)
    assert (report.fired, report.lease_lost) == ([], True)
    assert iterations(cli) == 0


def test_a_pass_decides_with_the_time_taken_under_the_lock(cli: CLI) -> None:
    store = due_loop(cli)
    daemon = LeaseFile(store.paths, "daemon", ttl=TTL)
    assert daemon.acquire(clock.now()) is None
    # A `now` from long before: the loop was not due then, it is now.
    report = driver_pass(store, clock.now() - 3600, lease=daemon)
    wait_for_children(report.children)
    assert [f["loop"] for f in report.fired] == ["steady"]
    assert iterations(cli) == 1
