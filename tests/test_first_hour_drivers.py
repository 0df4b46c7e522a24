"""A newcomer's first hour with the drivers: the daemon's log names every
run's end, even when two loops' runs share an id (run ids are unique per
loop only)."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from conftest import CLI, agent_command, wait_for

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
