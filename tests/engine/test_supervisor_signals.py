"""Signalling a live supervisor, end to end (firing.signal_supervisor).

`loopctl stop NAME --kill` and `--overlap replace` both end a run in flight
by sending SIGTERM to its supervisor, which kills the agent's whole tree
(its setsid() grandchildren too) and records the run `killed`. These tests
start real runs of the fake agent and check the processes themselves with
psutil: the agent, its grandchild and the supervisor must be gone.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faults.support import gone, in_flight
from process_support import ignores_term, kill_leftovers, pids_in

from conftest import CLI, agent_command, wait_for

FOREVER = "120"  # longer than any test: only a kill ends these processes


@pytest.fixture(autouse=True)
def reap(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftovers(tmp_path)


def all_gone(*pids: int) -> bool:
    return all(gone(pid) for pid in pids)


def at(moment: float) -> dict[str, str]:
    """An env whose loopctl clock reads `moment` when the command starts."""
    return {"LOOPCTL_CLOCK_OFFSET": f"{moment - time.time():.3f}"}


def start_running(cli: CLI, pid_file: Path, *agent_args: str) -> tuple[dict[str, Any], int]:
    """Fire loop `victim` (an agent with a setsid() grandchild that sleeps),
    and return its run once the agent and the grandchild both live."""
    cli("start", "p", "--name", "victim", "--every", "1h",
        "--env", f"FAKE_AGENT_PIDS={pid_file}",
        "--command", agent_command(*agent_args, "--grandchild", FOREVER, "--sleep", FOREVER),
        check=0)
    cli("tick", check=0)
    run = wait_for(lambda: in_flight(cli, "victim"))
    (grandchild,) = wait_for(lambda: pids_in(pid_file))
    assert not gone(run["agent"]["pid"]) and not gone(grandchild)
    return run, grandchild


@pytest.mark.parametrize("agent_args", [(), ("--ignore-term",)],
                         ids=["tree-obeys-sigterm", "tree-ignores-sigterm"])
def test_stop_kill_ends_the_live_run_and_its_whole_tree(
        cli: CLI, tmp_path: Path, agent_args: tuple[str, ...]) -> None:
    # With --ignore-term the agent and its grandchild (which inherits the
    # ignored SIGTERM) only go with the SIGKILL after LOOPCTL_KILL_GRACE.
    run, grandchild = start_running(cli, tmp_path / "pids", *agent_args)
    ignoring = bool(agent_args)
    assert ignores_term(run["agent"]["pid"]) is ignoring
    assert ignores_term(grandchild) is ignoring
    out = cli("stop", "victim", "--kill", check=0)
    assert "being killed" in out.stdout
    (record,) = wait_for(lambda: cli.records("victim"), timeout=20)
    assert record["run_id"] == run["run_id"]
    assert record["outcome"] == "killed", record
    assert "SIGTERM" in record["note"]
    # The record is written after the tree was killed: a short wait covers
    # only the kernel finishing off SIGKILLed processes.
    wait_for(lambda: all_gone(run["agent"]["pid"], grandchild, run["supervisor"]["pid"]),
             timeout=5)
    status = cli.json("status", "victim")
    assert status["status"] == "stopped", status
    assert cli.json("tick")["fired"] == []


def test_overlap_replace_kills_the_live_run_and_starts_anew(cli: CLI, tmp_path: Path) -> None:
    pid_file, gate = tmp_path / "pids", tmp_path / "gate"
    cli("start", "p", "--name", "rep", "--cron", "* * * * *", "--tz", "UTC",
        "--overlap", "replace", "--env", f"FAKE_AGENT_PIDS={pid_file}",
        "--command", agent_command("--grandchild", FOREVER, "--wait-for", str(gate)), check=0)
    slot = (time.time() // 60 + 2) * 60  # a minute boundary after the loop's first slot
    (first,) = cli.json("tick", env=at(slot + 5))["fired"]
    run = wait_for(lambda: in_flight(cli, "rep"))
    (grandchild,) = wait_for(lambda: pids_in(pid_file))

    # The next slot comes due while the run is in flight: replace it.
    second = cli.json("tick", env=at(slot + 65))
    assert second["fired"] == [], second
    (killed,) = wait_for(lambda: cli.records("rep"), timeout=20)
    assert (killed["run_id"], killed["outcome"]) == (first["run_id"], "killed"), killed
    wait_for(lambda: all_gone(run["agent"]["pid"], grandchild, run["supervisor"]["pid"]),
             timeout=5)

    # The replaced fire was kept: the next pass starts the new run at once.
    (fresh,) = cli.json("tick", env=at(slot + 70))["fired"]
    assert fresh["loop"] == "rep" and fresh["run_id"] != first["run_id"]
    wait_for(lambda: in_flight(cli, "rep"))
    gate.touch()
    records = wait_for(lambda: len(cli.records("rep")) == 2 and cli.records("rep"), timeout=20)
    assert [r["outcome"] for r in records] == ["killed", "ok"], records
    # The new run's grandchild outlived its agent: killed as a leftover.
    assert "leftover" in records[1]["note"], records[1]
    wait_for(lambda: all_gone(*pids_in(pid_file)), timeout=5)
