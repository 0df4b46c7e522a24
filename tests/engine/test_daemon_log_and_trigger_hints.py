"""A newcomer's first hour with the drivers: the daemon's log names every
run's end, even when two loops' runs share an id (run ids are unique per
loop only), and `trigger` says what will fire the loop, or that nothing
will."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import CLI, TESTS, agent_command, wait_for

TTL = "3"


def daemon(cli: CLI, log: Path) -> subprocess.Popen[str]:
    with log.open("w") as handle:
        proc = cli.popen("daemon", env={"LOOPCTL_LEASE_TTL": TTL}, stderr=handle)
    lease = cli.state_dir / "lease.json"
    wait_for(lambda: lease.exists() and json.loads(lease.read_text()).get("pid") == proc.pid)
    return proc


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=15)


def test_the_daemon_logs_the_end_of_two_loops_runs_that_share_an_id(
        cli: CLI, tmp_path: Path) -> None:
    cli("start", "--name", "good", "--every", "1h", "--command", agent_command(), "--", "p",
        check=0)
    cli("start", "--name", "bad", "--every", "1h", "--command",
        agent_command("--stderr", "could not connect", "--exit", "1"), "--", "p", check=0)
    log = tmp_path / "daemon.log"
    proc = daemon(cli, log)
    try:
        records = wait_for(lambda: (cli.records("good"), cli.records("bad"))
                           if cli.records("good") and cli.records("bad") else None,
                           timeout=30)
        assert records[0][0]["run_id"] == records[1][0]["run_id"]  # the case in question
        wait_for(lambda: " of bad ended: " in log.read_text()
                 and " of good ended: " in log.read_text(), timeout=10)
    finally:
        stop(proc)
    text = log.read_text()
    assert "of good ended: ok" in text, text
    assert "of bad ended: failed (exit 1" in text and "could not connect" in text, text


@pytest.fixture
def fake_cron(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    table = tmp_path / "crontab.txt"
    monkeypatch.setenv("LOOPCTL_CRONTAB", str(TESTS / "cronbin" / "crontab"))
    monkeypatch.setenv("FAKE_CRONTAB_FILE", str(table))
    return table


def test_a_trigger_with_no_driver_says_nothing_will_fire_it_and_how_to_start_one(
        cli: CLI, fake_cron: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import loopctl.integrations.crontab as crontab

    monkeypatch.setattr(crontab, "cron_daemon_running", lambda: False)  # in-process trigger
    cli("start", "p", "--name", "od", "--on-demand", "--command", agent_command(), check=0)
    proc = cli("trigger", "od", check=0)  # accepted all the same: the trigger is kept
    assert "no driver is running, so nothing fires it" in proc.stdout, proc.stdout
    assert "`loopctl daemon`" in proc.stdout and "`loopctl cron install`" in proc.stdout
    assert "next driver pass" not in proc.stdout
    assert cli.json("trigger", "od")["driver"] == "none"
    # A crontab line without cron running is no driver either; with cron, its tick is.
    cli("cron", "install", check=0)
    assert cli.json("trigger", "od")["driver"] == "none"
    monkeypatch.setattr(crontab, "cron_daemon_running", lambda: True)
    assert "cron's next `loopctl tick` fires it" in cli("trigger", "od", check=0).stdout
    old = (cli.state_dir / "cron-line").stat().st_mtime - 600
    os.utime(cli.state_dir / "cron-line", (old, old))  # ten minutes, and no tick came
    said = cli("trigger", "od", check=0).stdout
    assert "no tick has reached this home lately" in said and "loopctl doctor" in said


def test_a_trigger_under_a_daemon_says_within_a_second_and_fires(
        cli: CLI, tmp_path: Path) -> None:
    cli("start", "p", "--name", "od", "--on-demand", "--command", agent_command(), check=0)
    proc = daemon(cli, tmp_path / "daemon.log")
    try:
        said = cli("trigger", "od", check=0).stdout
        assert f"the daemon (pid {proc.pid}) fires it within a second" in said, said
        wait_for(lambda: cli.records("od"), timeout=15)
    finally:
        stop(proc)


def test_a_gate_skipped_fire_costs_the_daemon_log_one_line(cli: CLI, tmp_path: Path) -> None:
    cli("start", "--name", "gated", "--every", "1h", "--command", agent_command(),
        "--if", "false", "--", "p", check=0)
    log = tmp_path / "daemon.log"
    proc = daemon(cli, log)
    try:
        wait_for(lambda: [r for r in cli.records("gated") if r.get("outcome") == "skipped"],
                 timeout=30)
        # A fire after the skipped run's record exists: the pass that logs its
        # end has seen the skipped one too.
        cli("start", "--name", "later", "--every", "1h", "--command", agent_command(), "--",
            "p", check=0)
        wait_for(lambda: " of later ended: " in log.read_text(), timeout=30)
    finally:
        stop(proc)
    about_gated = [line for line in log.read_text().splitlines() if "gated" in line]
    assert len(about_gated) == 1 and "fired gated run " in about_gated[0], about_gated
