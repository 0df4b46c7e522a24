"""A supervisor acts only on the run it owns (loopctl/engine/supervisor.py).

- It refuses to start a run that state says belongs to another supervisor,
  or that nobody claimed (`python -m loopctl.engine.supervisor LOOP RUN_ID` by hand).
- A run that a driver meanwhile recorded `lost` (it believed the supervisor
  dead) is recorded by the supervisor when it ends, but the loop, already
  settled by the driver, is not settled a second time. The driver also
  killed the run's agent, as it kills whatever a dead supervisor left
  (DESIGN §14): the supervisor's record says so.
- A run whose loop was removed meanwhile (`loopctl rm`, possible once the run
  was recorded lost) ends cleanly and does not bring the loop back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from faults.support import count_lines, gone, in_flight, loop_state, one_clear_line
from process_support import kill_leftovers

from conftest import CLI, agent_command, wait_for
from loopctl.storage.locks import hold


@pytest.fixture(autouse=True)
def reap(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftovers(tmp_path)


def start_gated(cli: CLI, name: str, gate: Path, *agent_args: str) -> None:
    """A loop whose agent runs until the test touches `gate`, then exits 0."""
    cli("start", "p", "--name", name, "--every", "1h",
        "--command", agent_command(*agent_args, "--wait-for", str(gate)), check=0)


def believe_supervisor_dead(cli: CLI, name: str) -> None:
    """Make drivers take the live supervisor for a dead one: its recorded
    create time no longer matches (as after a reused pid). Edited under the
    store lock, like every writer of state.json."""
    state_file = cli.state_dir / "state.json"
    with hold(cli.state_dir / "store.lock", timeout=30):
        state = json.loads(state_file.read_text())
        state["loops"][name]["run"]["supervisor"]["ct"] -= 1000
        fresh = state_file.with_suffix(".test-tmp")
        fresh.write_text(json.dumps(state))
        os.replace(fresh, state_file)


def record_lost(cli: CLI, name: str, run: dict[str, Any]) -> None:
    believe_supervisor_dead(cli, name)
    report = cli.json("tick")
    assert report["lost"] == [run["run_id"]], report
    assert report["fired"] == [], report  # the pass that finds it lost fires nothing for it
    # The driver killed what it took for a dead supervisor's leftovers.
    wait_for(lambda: gone(run["agent"]["pid"]), timeout=10)


@pytest.mark.parametrize("whose", ["another-supervisor", "unclaimed"])
def test_a_supervisor_refuses_a_run_it_does_not_own(cli: CLI, tmp_path: Path,
                                                    whose: str) -> None:
    starts, gate = tmp_path / "starts.jsonl", tmp_path / "gate"
    start_gated(cli, "own", gate, "--record", str(starts))
    cli("tick", check=0)
    run = wait_for(lambda: in_flight(cli, "own"))
    wait_for(starts.exists)
    # A well-formed run id either way: the claimed one, or one never claimed.
    run_id = run["run_id"] if whose == "another-supervisor" else run["run_id"][:-4] + "0099"
    # If the check were missing, this supervisor would run its own agent
    # until the gate opens: the timeout turns that into a failure.
    intruder = subprocess.run([sys.executable, "-m", "loopctl.engine.supervisor", "own", run_id],
                              capture_output=True, text=True, timeout=30)
    assert intruder.returncode == 1, intruder
    expected = "belongs to another supervisor" if whose == "another-supervisor" \
        else "is not claimed; not starting"
    assert expected in one_clear_line(intruder.stderr)
    # Nothing started and nothing changed: the run is still its owner's.
    assert in_flight(cli, "own") == run
    assert count_lines(starts) == 1
    gate.touch()
    (record,) = wait_for(lambda: cli.records("own"), timeout=20)
    assert (record["run_id"], record["outcome"]) == (run["run_id"], "ok"), record
    assert count_lines(starts) == 1


def test_a_run_recorded_lost_meanwhile_is_recorded_but_not_settled_again(
        cli: CLI, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    start_gated(cli, "lost", gate)
    cli("tick", check=0)
    run = wait_for(lambda: in_flight(cli, "lost"))
    record_lost(cli, "lost", run)
    wait_for(lambda: gone(run["supervisor"]["pid"]), timeout=20)
    settled_by_driver = loop_state(cli, "lost")
    assert settled_by_driver["outcomes"] == ["lost"] and settled_by_driver["run"] is None
    # The supervisor's record (what really happened: its agent was killed)
    # replaces the guess...
    (record,) = cli.records("lost")
    assert record["run_id"] == run["run_id"]
    assert (record["outcome"], record["exit_code"]) == ("failed", 137), record
    # ...but the loop keeps the driver's settlement: no second iteration,
    # outcome or next due time from the same run.
    assert loop_state(cli, "lost") == settled_by_driver
    after = cli.json("tick")
    assert (after["fired"], after["lost"]) == ([], []), after
    assert loop_state(cli, "lost")["orphan"] is None  # its agent has exited


def test_a_run_whose_loop_was_removed_meanwhile_ends_without_bringing_it_back(
        cli: CLI, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    start_gated(cli, "doomed", gate)
    # `loopctl run`: the supervisor is in the foreground, so its exit code
    # and error output can be checked.
    runner = cli.popen("run", "doomed", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    run = wait_for(lambda: in_flight(cli, "doomed"))
    refused = cli("rm", "doomed")
    assert refused.returncode == 75
    assert "run in flight" in one_clear_line(refused.stderr)

    record_lost(cli, "doomed", run)
    cli("rm", "doomed", check=0)
    _, err = runner.communicate(timeout=30)
    assert runner.returncode == 1, err
    assert ": failed (exit 137)" in one_clear_line(err)
    # Neither the definition nor the state entry came back.
    assert cli.json("ls")["loops"] == []
    assert "doomed" not in cli.state()["loops"]
    assert not yaml.safe_load((cli.home / "loops.yaml").read_text())["loops"]
    after = cli.json("tick")
    assert (after["fired"], after["lost"], after["skipped"]) == ([], [], []), after
    # ... and no run file either: a new loop under the same name must not
    # inherit this run in its history.
    assert not (cli.state_dir / "runs" / "doomed").exists()
