"""Fault 4: the daemon SIGSTOPped across a due time, then SIGCONT.

The lease side (a stopped daemon keeps the lease until the TTL) is in
tests/engine/test_drivers_sharing_a_home.py
(test_sigstopped_daemon_loses_the_lease_only_after_the_ttl).
Here: what fires. Missed occurrences collapse into one catch-up run that
records how many were missed, the next fire is computed from the end of that
run, and no fire is started twice, whether the daemon itself catches up or a
`tick` took the lease over while it was stopped.
"""

from __future__ import annotations

import signal
import subprocess
import time
from typing import Any

import psutil
import pytest
from filelock import FileLock, Timeout

from conftest import CLI, wait_for

from .support import lease, loop_state, settled, stop, ts

EVERY = 2.0


def sigstop_outside_locks(cli: CLI, proc: subprocess.Popen[Any]) -> float:
    """SIGSTOP `proc` at a moment it holds neither lock (a driver frozen inside
    the store lock is another fault: everyone waits for the lock's timeout)."""
    for _ in range(200):
        proc.send_signal(signal.SIGSTOP)
        # SIGSTOP takes effect asynchronously: a daemon still running could
        # take a lock right after the check below.
        wait_for(lambda: psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED)
        try:
            for name in ("store.lock", "lease.lock"):
                FileLock(cli.state_dir / name, timeout=0).acquire().lock.release()
            return time.time()
        except Timeout:
            proc.send_signal(signal.SIGCONT)
            time.sleep(0.02)
    raise AssertionError("the daemon never let go of its locks")


def stay_stopped_past_two_due_times(cli: CLI) -> None:
    """The fault itself: no driver runs across at least two due times of the
    loop (whatever the phase), so its next fire is a catch-up with at least
    one missed occurrence. Waits on the loop's own due time, not a guess."""
    due = loop_state(cli, "steady")["next_due"]
    wait_for(lambda: time.time() >= due + EVERY + 0.5, timeout=30, interval=0.1)


def check_runs(cli: CLI, resumed_at: float) -> list[dict[str, Any]]:
    """Invariants of the whole history; returns the runs fired after SIGCONT."""
    records = cli.records("steady")
    assert loop_state(cli, "steady")["iterations"] == len(records), "a fire was claimed twice"
    assert len({r["due_at"] for r in records}) == len(records), "a due fire ran twice"
    for earlier, later in zip(records, records[1:], strict=False):
        # `--every` waits from the end of the previous run (record times are
        # whole seconds, hence the 1 s of slack).
        assert ts(later["due_at"]) >= ts(earlier["ended_at"]) + EVERY - 1, (earlier, later)
    return [r for r in records if ts(r["started_at"]) >= int(resumed_at)]


@pytest.mark.slow
def test_a_stopped_daemon_catches_up_once_when_continued(cli: CLI) -> None:
    cli("start", "p", "--name", "steady", "--every", "2s", "--command", "true", check=0)
    daemon = cli.popen("daemon", stderr=subprocess.PIPE)
    try:
        wait_for(lambda: len(cli.records("steady")) >= 1)
        stopped_at = sigstop_outside_locks(cli, daemon)
        wait_for(lambda: settled(cli, "steady"))  # a run in flight finishes meanwhile
        before = len(cli.records("steady"))
        stay_stopped_past_two_due_times(cli)
        assert len(cli.records("steady")) == before, "something fired while no driver ran"
        resumed_at = time.time()
        daemon.send_signal(signal.SIGCONT)
        wait_for(lambda: len(cli.records("steady")) >= before + 2, timeout=30)
    finally:
        daemon.send_signal(signal.SIGCONT)
        stop(daemon)
    after = check_runs(cli, resumed_at)
    catch_up, following = after[0], after[1]
    assert ts(catch_up["due_at"]) < resumed_at, catch_up
    assert ts(catch_up["due_at"]) <= stopped_at + EVERY + 1, catch_up
    # The occurrences between the stale due time and the catch-up are counted
    # (at the claim, a moment before the run's start on a loaded machine).
    late = ts(catch_up["started_at"]) - ts(catch_up["due_at"])
    assert 1 <= catch_up["missed"] <= late // EVERY + 1, catch_up
    # The next fire is computed from the end of the catch-up, not the stale due.
    assert following["missed"] <= 1, following
    assert [r for r in after if ts(r["due_at"]) < resumed_at] == [catch_up]


@pytest.mark.slow
def test_a_tick_takes_over_a_stopped_daemon_and_it_does_not_fire_again(cli: CLI) -> None:
    env = {"LOOPCTL_LEASE_TTL": "2"}
    cli("start", "p", "--name", "steady", "--every", "2s", "--command", "true", check=0)
    daemon = cli.popen("daemon", env=env, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: len(cli.records("steady")) >= 1)
        stopped_at = sigstop_outside_locks(cli, daemon)
        wait_for(lambda: settled(cli, "steady"))
        # Past two due times and the TTL, a tick takes the lease (its
        # holder's heartbeat is stale) and fires one catch-up.
        stay_stopped_past_two_due_times(cli)
        report = wait_for(lambda: (r := cli.json("tick", env=env))["deferred_to"] is None
                          and r, timeout=30)
        assert [f["loop"] for f in report["fired"]] == ["steady"], report
        by_tick = report["fired"][0]
        assert ts(by_tick["due_at"]) < time.time()
        wait_for(lambda: settled(cli, "steady") and cli.records("steady")[-1]["run_id"]
                 == by_tick["run_id"])
        count = len(cli.records("steady"))
        resumed_at = time.time()
        daemon.send_signal(signal.SIGCONT)
        # The daemon takes the lease back and goes on firing on schedule.
        wait_for(lambda: (lease(cli) or {}).get("pid") == daemon.pid, timeout=15)
        wait_for(lambda: len(cli.records("steady")) > count, timeout=30)
    finally:
        daemon.send_signal(signal.SIGCONT)
        stop(daemon)
    log = daemon.stderr.read() if daemon.stderr else ""
    check_runs(cli, resumed_at)
    assert by_tick["run_id"] not in log, "the daemon fired the tick's fire again"
    assert by_tick["missed"] >= 1
    assert stopped_at < resumed_at
