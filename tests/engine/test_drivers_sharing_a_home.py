"""Drivers sharing one home: lease takeover, daemon reload, signals (issue 3)."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from conftest import CLI, agent_command, wait_for

TTL = "3"


def start(cli: CLI, name: str, *agent_args: str, every: str = "1h",
          extra: tuple[str, ...] = ()) -> None:
    cli("start", "p", "--name", name, "--every", every,
        "--command", agent_command(*agent_args), *extra, check=0)


def lease(cli: CLI) -> dict | None:
    try:
        return json.loads((cli.state_dir / "lease.json").read_text())
    except FileNotFoundError:
        return None


def daemon(cli: CLI, ttl: str = TTL, log: Path | None = None) -> subprocess.Popen[str]:
    """A daemon holding the lease; its stderr to `log` (read while it runs)
    or to a pipe (read by stop_daemon)."""
    if log is None:
        proc = cli.popen("daemon", env={"LOOPCTL_LEASE_TTL": ttl}, stderr=subprocess.PIPE)
    else:
        with log.open("w") as handle:
            proc = cli.popen("daemon", env={"LOOPCTL_LEASE_TTL": ttl}, stderr=handle)
    wait_for(lambda: (lease(cli) or {}).get("pid") == proc.pid)
    return proc


def stop_daemon(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=15)
    return proc.stderr.read() if proc.stderr else ""


def test_tick_defers_to_a_live_daemon(cli: CLI) -> None:
    proc = daemon(cli)
    try:
        start(cli, "due", "--sleep", "2")  # with nothing due, tick exits before looking
        out = cli("tick", env={"LOOPCTL_LEASE_TTL": TTL})
        assert out.returncode == 0
        assert f"daemon pid {proc.pid} holds the lease" in out.stderr
    finally:
        stop_daemon(proc)


def test_tick_takes_over_from_a_sigkilled_daemon_at_once(cli: CLI) -> None:
    proc = daemon(cli)
    proc.kill()
    proc.wait()
    start(cli, "due", "--print", "x")
    report = cli.json("tick", env={"LOOPCTL_LEASE_TTL": "3600"})
    assert report["deferred_to"] is None
    assert [f["loop"] for f in report["fired"]] == ["due"]


def loop_state(cli: CLI, name: str) -> dict:
    return cli.state()["loops"][name]


def next_heartbeat(cli: CLI) -> None:
    """Wait until the lease holder renews its heartbeat."""
    beat = lease(cli)["heartbeat"]
    wait_for(lambda: (lease(cli) or {}).get("heartbeat", 0) > beat)


def lock_free(path: Path) -> bool:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing drops the lock if we took it


def sigstop_outside_locks(cli: CLI, proc: subprocess.Popen[str]) -> None:
    """SIGSTOP `proc` at a moment it holds neither lock: frozen inside
    lease.lock it would make every tick wait for the lock (another fault)."""
    for _ in range(100):
        proc.send_signal(signal.SIGSTOP)
        wait_for(lambda: psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED)
        if all(lock_free(cli.state_dir / name) for name in ("store.lock", "lease.lock")):
            return
        proc.send_signal(signal.SIGCONT)
    raise AssertionError("the daemon never let go of its locks")


@pytest.mark.slow
def test_sigstopped_daemon_loses_the_lease_only_after_the_ttl(cli: CLI) -> None:
    proc = daemon(cli)
    try:
        sigstop_outside_locks(cli, proc)
        # Frozen, the daemon cannot renew this heartbeat: the lease is
        # takeable only once it is TTL old.
        expires = lease(cli)["heartbeat"] + float(TTL)
        ticks: list[tuple[float, dict]] = []

        def taken_over() -> bool:
            report = cli.json("tick", env={"LOOPCTL_LEASE_TTL": TTL})
            ticks.append((time.time(), report))
            return report["deferred_to"] is None

        wait_for(taken_over, timeout=60, interval=0.2)
    finally:
        proc.send_signal(signal.SIGCONT)
        stop_daemon(proc)
    # Each tick that ended before the expiry deferred to the stopped daemon,
    # and the one that took over ended after it (on a slow machine the
    # first tick may already end past the expiry: then it takes over).
    *deferred, (taken_at, _) = ticks
    assert taken_at >= expires, (taken_at, expires)
    for _, report in deferred:
        assert report["deferred_to"]["pid"] == proc.pid, report


def test_daemon_picks_up_a_new_loop_within_seconds(cli: CLI) -> None:
    # Nothing else wakes this daemon for an hour (its only loop ran and is
    # due in 1h; a 3600 s TTL renews the lease every 20 min): only its
    # one-second look at loops.yaml can fire the new loop within the bound.
    start(cli, "first", "--print", "x")
    proc = daemon(cli, ttl="3600")
    try:
        wait_for(lambda: cli.records("first"))  # its first passes are done
        added = time.time()
        start(cli, "late", "--print", "x")
        records = wait_for(lambda: cli.records("late"), timeout=30)
        from loopctl.domain.timestamps import parse_iso

        # ~1-2 s on an idle machine; the bound leaves room for a busy one
        # (and for the record's whole seconds) and is still far below any
        # other wake-up.
        assert parse_iso(records[0]["started_at"]) - added <= 10
    finally:
        stop_daemon(proc)


def test_daemon_sigterm_leaves_the_run_in_flight_to_finish(cli: CLI) -> None:
    start(cli, "long", "--sleep", "3", "--print", "finished")
    proc = daemon(cli)
    run = wait_for(lambda: (cli.state()["loops"]["long"].get("run") or {}).get("agent")
                   and cli.state()["loops"]["long"]["run"])
    log = stop_daemon(proc)
    assert proc.returncode == 0
    assert "lease released" in log
    assert lease(cli) is None
    assert psutil.pid_exists(run["supervisor"]["pid"])
    record = wait_for(lambda: cli.records("long"), timeout=15)[0]
    assert record["outcome"] == "ok"


@pytest.mark.slow  # several seconds: handed out early, never the tail
def test_daemon_stops_firing_on_a_broken_file_and_resumes(cli: CLI, tmp_path: Path) -> None:
    start(cli, "steady", "--print", "x", every="1s")
    loops = cli.home / "loops.yaml"
    good, broken = loops.read_text(), "version: 1\nloops: [oops\n"
    log = tmp_path / "daemon.log"
    proc = daemon(cli, log=log)
    try:
        wait_for(lambda: cli.records("steady"))
        loops.write_text(broken)
        wait_for(lambda: "not firing" in log.read_text())
        # A run in flight at the switch settles; nothing is claimed after it.
        wait_for(lambda: not loop_state(cli, "steady")["run"])
        claims, count = loop_state(cli, "steady")["iterations"], len(cli.records("steady"))
        # Three lease renewals (one a second): the daemon is awake, and an
        # every-1s loop would have been claimed again meanwhile.
        for _ in range(3):
            next_heartbeat(cli)
        assert loop_state(cli, "steady")["iterations"] == claims
        assert len(cli.records("steady")) == count
        assert loops.read_text() == broken
        loops.write_text(good)
        wait_for(lambda: len(cli.records("steady")) > count, timeout=10)
    finally:
        stop_daemon(proc)
    text = log.read_text()
    assert "not firing" in text and "line" in text
