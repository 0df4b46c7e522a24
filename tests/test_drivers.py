"""Drivers sharing one home: lease takeover, daemon reload, signals (issue 3)."""

from __future__ import annotations

import json
import signal
import subprocess
import time

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


def daemon(cli: CLI) -> subprocess.Popen[str]:
    proc = cli.popen("daemon", env={"LOOPCTL_LEASE_TTL": TTL}, stderr=subprocess.PIPE)
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


@pytest.mark.slow
def test_sigstopped_daemon_loses_the_lease_only_after_the_ttl(cli: CLI) -> None:
    proc = daemon(cli)
    try:
        proc.send_signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        held = cli.json("tick", env={"LOOPCTL_LEASE_TTL": TTL})
        assert held["deferred_to"]["pid"] == proc.pid
        heartbeat_age = time.time() - lease(cli)["heartbeat"]
        time.sleep(max(float(TTL) - heartbeat_age, 0) + 0.5)
        taken = cli.json("tick", env={"LOOPCTL_LEASE_TTL": TTL})
        assert taken["deferred_to"] is None
        assert time.monotonic() - stopped_at >= float(TTL) - 1.5
    finally:
        proc.send_signal(signal.SIGCONT)
        stop_daemon(proc)


def test_daemon_picks_up_a_new_loop_within_seconds(cli: CLI) -> None:
    proc = daemon(cli)
    try:
        time.sleep(0.5)
        added = time.time()
        start(cli, "late", "--print", "x")
        records = wait_for(lambda: cli.records("late"), timeout=10)
        from loopctl.schedule import parse_iso

        assert parse_iso(records[0]["started_at"]) - added <= 3
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


def test_daemon_stops_firing_on_a_broken_file_and_resumes(cli: CLI) -> None:
    start(cli, "steady", "--print", "x", every="1s")
    loops = cli.home / "loops.yaml"
    good = loops.read_text()
    proc = daemon(cli)
    try:
        wait_for(lambda: cli.records("steady"))
        loops.write_text("version: 1\nloops: [oops\n")
        time.sleep(1.5)  # a run in flight at the switch may still settle
        count = len(cli.records("steady"))
        time.sleep(3)
        assert len(cli.records("steady")) == count
        assert loops.read_text() == "version: 1\nloops: [oops\n"
        loops.write_text(good)
        wait_for(lambda: len(cli.records("steady")) > count, timeout=10)
    finally:
        log = stop_daemon(proc)
    assert "not firing" in log and "line" in log
