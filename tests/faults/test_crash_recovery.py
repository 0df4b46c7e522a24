"""Faults 5, 6 and 7: drivers and supervisors killed, runs that overrun.

Already covered in tests/ and not repeated here:
- 5, SIGTERM to a daemon with a run in flight: lease released, the run
  finishes and is recorded (tests/engine/test_drivers_sharing_a_home.py:
  test_daemon_sigterm_leaves_the_run_in_flight_to_finish);
- 6, supervisor SIGKILLed: recorded `lost` by the next tick; its agent died
  with it (tests/engine/test_firing.py: test_supervisor_killed_mid_run_is_recorded_lost;
  the hostile versions in tests/engine/test_containment.py);
- 7, a `setsid()` grandchild outliving a timeout of `loopctl run`
  (tests/engine/test_firing.py: test_timeout_kills_a_setsid_grandchild).
What is added: the loop after a killed supervisor, by ticks and by a daemon,
the next driver after a SIGTERMed daemon, and the timeout of a scheduled run
whose agent also ignores SIGTERM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import CLI, agent_command, wait_for

from .support import (
    asleep_in_select,
    count_lines,
    gone,
    in_flight,
    lease,
    loop_state,
    settled,
    start_gated,
    stop,
)


def kill_supervisor(cli: CLI, loop: str) -> dict:
    run = wait_for(lambda: in_flight(cli, loop))
    os.kill(run["supervisor"]["pid"], signal.SIGKILL)
    wait_for(lambda: gone(run["supervisor"]["pid"]))
    return run


def test_the_agent_dies_with_its_killed_supervisor_and_the_loop_fires_after(
        cli: CLI, tmp_path: Path) -> None:
    gate, starts = tmp_path / "gate", tmp_path / "starts"
    start_gated(cli, "orphan", gate, every="1s", starts=starts)
    assert [f["loop"] for f in cli.json("tick")["fired"]] == ["orphan"]
    run = kill_supervisor(cli, "orphan")
    # DESIGN §14: the agent died with its supervisor (PR_SET_PDEATHSIG), so
    # no orphan is left to run beside the next fire or to block the loop.
    wait_for(lambda: gone(run["agent"]["pid"]), timeout=5)
    first = cli.json("tick")
    assert first["lost"] == [run["run_id"]] and first["fired"] == []
    assert loop_state(cli, "orphan")["orphan"] is None
    assert loop_state(cli, "orphan")["failures"] == 1
    # Counted in the pass's own state write, as /metrics reads it (DESIGN §19).
    assert loop_state(cli, "orphan")["tally"]["runs"] == {"lost": 1}

    gate.touch()
    wait_for(lambda: loop_state(cli, "orphan")["next_due"] < time.time())
    after = cli.json("tick")
    assert [f["loop"] for f in after["fired"]] == ["orphan"], after
    records = wait_for(lambda: len(cli.records("orphan")) == 2 and cli.records("orphan"))
    assert [r["outcome"] for r in records] == ["lost", "ok"]
    wait_for(lambda: loop_state(cli, "orphan")["tally"]["runs"] == {"lost": 1, "ok": 1})
    assert "still running" not in (records[0]["note"] or "")
    assert count_lines(starts) == 2


@pytest.mark.slow
def test_a_daemon_records_the_lost_run_and_fires_again(cli: CLI, tmp_path: Path) -> None:
    gate, starts = tmp_path / "gate", tmp_path / "starts"
    start_gated(cli, "orphan", gate, every="1s", starts=starts)
    cli("tick", check=0)
    run = kill_supervisor(cli, "orphan")
    wait_for(lambda: gone(run["agent"]["pid"]), timeout=5)  # died with its supervisor
    daemon = cli.popen("daemon", stderr=subprocess.PIPE)
    try:
        wait_for(lambda: cli.records("orphan"))  # the daemon's first pass: lost
        gate.touch()
        wait_for(lambda: len(cli.records("orphan")) >= 2, timeout=30)
    finally:
        stop(daemon)
    log = daemon.stderr.read() if daemon.stderr else ""
    assert f"recorded run {run['run_id']} as lost" in log
    assert [r["outcome"] for r in cli.records("orphan")[:2]] == ["lost", "ok"]
    assert count_lines(starts) >= 2


@pytest.mark.slow
def test_a_running_daemon_notices_a_killed_supervisor(cli: CLI, tmp_path: Path) -> None:
    gate, starts = tmp_path / "gate", tmp_path / "starts"
    start_gated(cli, "victim", gate, every="1s", starts=starts)
    daemon = cli.popen("daemon", "--quiet", env={"LOOPCTL_LEASE_TTL": "3"})
    try:
        run = wait_for(lambda: in_flight(cli, "victim"))
        # The daemon has seen the run start: the claim's state write woke it,
        # and it waits in select() again only once it has taken that in.
        wait_for(lambda: asleep_in_select(daemon.pid))
        kill_supervisor(cli, "victim")
        gate.touch()
        wait_for(lambda: gone(run["agent"]["pid"]))
        # A heartbeat (1 s here) or two later when quiet; the bound is wide because
        # a loaded machine starves the daemon (seen in a full run), and no other
        # process records a lost run here, so what ends the wait is the daemon.
        wait_for(lambda: cli.records("victim"), timeout=20)
        wait_for(lambda: len(cli.records("victim")) >= 2, timeout=20)
    finally:
        stop(daemon)
    assert [r["outcome"] for r in cli.records("victim")[:2]] == ["lost", "ok"]


def test_a_driver_after_a_sigtermed_daemon_does_not_fire_its_run_again(
        cli: CLI, tmp_path: Path) -> None:
    gate, starts = tmp_path / "gate", tmp_path / "starts"
    start_gated(cli, "long", gate, starts=starts)
    first = cli.popen("daemon", "--quiet")
    run = wait_for(lambda: in_flight(cli, "long"))
    assert stop(first) == 0
    assert lease(cli) is None
    second = cli.popen("daemon", "--quiet")
    try:
        wait_for(lambda: (lease(cli) or {}).get("pid") == second.pid)
        report = cli.json("tick")  # and a tick: it defers to the new daemon
        assert report["deferred_to"]["pid"] == second.pid
        gate.touch()
        wait_for(lambda: cli.records("long") and settled(cli, "long"))
    finally:
        stop(second)
    records = cli.records("long")
    assert [(r["run_id"], r["outcome"]) for r in records] == [(run["run_id"], "ok")]
    assert loop_state(cli, "long")["iterations"] == 1
    assert count_lines(starts) == 1


def test_scheduled_timeout_kills_a_term_ignoring_agent_and_its_setsid_grandchild(
        cli: CLI, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    cli("start", "p", "--name", "stubborn", "--every", "1h", "--timeout", "1s",
        "--command", agent_command("--ignore-term", "--grandchild", "120", "--sleep", "120"),
        check=0)
    cli("tick", env={"FAKE_AGENT_PIDS": str(pids)}, check=0)
    run = wait_for(lambda: in_flight(cli, "stubborn"))
    record = wait_for(lambda: cli.records("stubborn"), timeout=30)[0]
    assert record["outcome"] == "timeout"
    assert record["exit_code"] == 128 + signal.SIGKILL  # SIGTERM was ignored
    grandchild = int(wait_for(lambda: pids.exists() and pids.read_text().split())[0])
    for pid in (run["agent"]["pid"], grandchild, run["supervisor"]["pid"]):
        wait_for(lambda pid=pid: gone(pid), timeout=5)
    state = loop_state(cli, "stubborn")
    assert state["run"] is None and state["status"] == "active"
    assert state["last_outcome"] == "timeout" and state["failures"] == 1
