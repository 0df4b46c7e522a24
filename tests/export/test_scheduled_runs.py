"""`loopctl export`, then the target's scheduler fires the loop again and
again (DESIGN §9, issue "G"): every target keeps the loop's guarantees (max
runs, completion, pause, the failure limit, the budget), local exports find the
agent under the scheduler's own PATH, and the scheduled entry point (`run
--scheduled`) exits 75 while a run is in flight or the agent is rate-limited;
a manual run refuses an inactive loop unless forced.

The simulators in tests/export/simulator.py play each scheduler from the exported file
alone: they extract the command it would run and fire it repeatedly with a
fresh HOME, TMPDIR and working directory, keeping only the loop's state and a
read-only definition, then count the run records.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import CLI, agent_command, wait_for
from export.simulator import FAKE_BIN, Fire, Simulator
from export.support import (
    TARGETS,
    SimFactory,
    make_sim_fixture,  # noqa: F401 - the make_sim fixture
    start,
)


def fire_all(sim: Simulator, times: int) -> list[Fire]:
    fires = [sim.fire() for _ in range(times)]
    for fire in fires:
        assert fire.fired_loopctl, fire.describe()
    sim.check_definition_untouched()
    return fires


def assert_skipped(fire: Fire, name: str, why: str = "") -> None:
    """A skipped scheduled fire: exit 0 and one line saying why."""
    assert fire.returncode == 0, fire.describe()
    lines = fire.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"loopctl: not firing {name}: "), \
        fire.describe()
    assert why in lines[0], fire.describe()


# -- the scheduler simulator -----------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_max_runs_bounds_a_scheduler_that_keeps_firing(cli: CLI, make_sim: SimFactory,
                                                      target: str) -> None:
    start(cli, "capped", "--every", "1h", "--max-runs", "2",
          "--command", agent_command("--print", "worked"))
    sim = make_sim("capped", target)
    fires = fire_all(sim, 4)
    assert [f.returncode for f in fires[:2]] == [0, 0], [f.describe() for f in fires]
    for fire in fires[2:]:
        assert_skipped(fire, "capped", "iteration_limit")
    records = sim.records()
    assert len(records) == 2
    assert {r["trigger"] for r in records} == {"schedule"}
    assert {r["outcome"] for r in records} == {"ok"}


@pytest.mark.parametrize("target", TARGETS)
def test_the_last_run_max_runs_allows_still_fires(cli: CLI, make_sim: SimFactory,
                                                  target: str) -> None:
    """`--max-runs 1` on a loop that is due at the first fire (as a fresh
    loop is): `tick` would run it once, so the scheduled entry point must too,
    and leave no claimed run behind."""
    start(cli, "once", "--every", "1h", "--max-runs", "1",
          "--command", agent_command("--print", "worked"))
    sim = make_sim("once", target)
    fires = fire_all(sim, 2)
    assert fires[0].returncode == 0 and "not firing" not in fires[0].stderr, \
        fires[0].describe()
    for fire in fires[1:]:
        assert_skipped(fire, "once", "iteration_limit")
    assert [(r["outcome"], r["trigger"]) for r in sim.records()] == [("ok", "schedule")]


@pytest.mark.parametrize("target", TARGETS)
def test_a_completed_loop_stops_firing(cli: CLI, make_sim: SimFactory, target: str) -> None:
    start(cli, "done", "--every", "1h", "--command", agent_command("--decide", "complete"))
    sim = make_sim("done", target)
    fires = fire_all(sim, 3)
    assert fires[0].returncode == 0, fires[0].describe()
    for fire in fires[1:]:
        assert_skipped(fire, "done", "completed")
    assert len(sim.records()) == 1


@pytest.mark.parametrize("target", TARGETS)
def test_a_paused_loop_does_not_fire(cli: CLI, make_sim: SimFactory, target: str) -> None:
    start(cli, "held", "--every", "1h", "--command", agent_command("--print", "worked"))
    if target in ("crontab", "systemd"):
        cli("pause", "held", check=0)      # the state the local scheduler will read
        sim = make_sim("held", target)
        before = 0
    else:
        sim = make_sim("held", target)
        assert sim.fire().returncode == 0   # the first fire creates the state there
        before = len(sim.records())
        assert before == 1
        paused = sim.admin("pause", "held")  # the definition is read-only: only state changes
        assert paused.returncode == 0, paused.stderr
    fires = fire_all(sim, 2)
    for fire in fires:
        assert_skipped(fire, "held", "paused")
    assert len(sim.records()) == before


@pytest.mark.parametrize("target", TARGETS)
def test_failure_limit_stops_a_scheduler_that_keeps_firing(cli: CLI, make_sim: SimFactory,
                                                          target: str) -> None:
    start(cli, "broken", "--every", "1h", "--max-failures", "2",
          "--command", agent_command("--exit", "1"))
    sim = make_sim("broken", target)
    fires = fire_all(sim, 3)
    assert all(f.returncode != 0 for f in fires[:2]), [f.describe() for f in fires]
    for fire in fires[2:]:
        assert_skipped(fire, "broken", "failure_limit")
    records = sim.records()
    assert len(records) == 2 and {r["outcome"] for r in records} == {"failed"}


@pytest.mark.parametrize("target", TARGETS)
def test_spent_budget_stops_a_scheduler_that_keeps_firing(cli: CLI, make_sim: SimFactory,
                                                         target: str) -> None:
    local = target in ("crontab", "systemd")
    # Values stay home: crontab/systemd read FAKE_COST from the local store; on
    # k8s/github only its name travels and the target's secret store has it.
    cost = "--env=FAKE_COST=0.6" if local else "--env=FAKE_COST"
    start(cli, "spender", "--every", "1h", "--agent", "claude", "--budget-usd", "1", cost,
          env={"PATH": f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}"})
    sim = make_sim("spender", target, secrets={"FAKE_COST": "0.6"})
    fires = fire_all(sim, 3)
    assert [f.returncode for f in fires[:2]] == [0, 0], [f.describe() for f in fires]
    for fire in fires[2:]:
        assert_skipped(fire, "spender", "budget_limit")
    records = sim.records()
    assert len(records) == 2
    assert [r["cost_usd"] for r in records] == [0.6, 0.6]


@pytest.mark.parametrize("target", ["crontab", "systemd"])
def test_local_exports_find_the_agent_under_the_schedulers_own_path(
        cli: CLI, make_sim: SimFactory, target: str) -> None:
    """cron runs jobs with PATH=/usr/bin:/bin, a systemd user manager with
    its own short PATH: an agent found at export time (as `loopctl cron
    install` finds it) must still be found when the scheduler fires."""
    start(cli, "pathy", "--every", "1h", "--agent", "claude",
          env={"PATH": f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}"})
    system = "/usr/bin:/bin" if target == "crontab" else \
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    sim = make_sim("pathy", target, extra_env={"PATH": system})
    fire = sim.fire()
    assert fire.returncode == 0, fire.describe()
    assert [r["outcome"] for r in sim.records()] == ["ok"], fire.describe()


def test_scheduled_run_exits_75_when_a_run_is_in_flight(cli: CLI, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    start(cli, "busy", "--every", "1h", "--command", agent_command("--wait-for", str(gate)))
    first = cli.popen("run", "busy", "--scheduled", stderr=subprocess.PIPE)
    try:
        wait_for(lambda: (cli.state_dir / "state.json").exists()
                 and cli.state()["loops"]["busy"].get("run"))
        second = cli("run", "busy", "--scheduled")
        assert second.returncode == 75, second.stderr
        assert "in flight" in second.stderr
    finally:
        gate.touch()
        first.communicate(timeout=30)
    assert first.returncode == 0
    assert len(cli.records("busy")) == 1


def test_scheduled_run_exits_75_while_rate_limited(cli: CLI) -> None:
    start(cli, "limited", "--every", "1h", "--agent", "claude",
          "--env", "FAKE_RESET_IN=3600", env={"PATH": f"{FAKE_BIN}{os.pathsep}"
                                                     f"{os.environ['PATH']}"})
    env = {"PATH": f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}"}
    first = cli("run", "limited", "--scheduled", env=env)
    assert [r["outcome"] for r in cli.records("limited")] == ["deferred"], first.stderr
    again = cli("run", "limited", "--scheduled", env=env)
    assert again.returncode == 75, (again.stdout, again.stderr)
    assert "rate-limited" in again.stderr
    assert len(cli.records("limited")) == 1


@pytest.mark.parametrize("how", ["pause", "complete"])
def test_manual_run_refuses_an_inactive_loop_unless_forced(cli: CLI, how: str) -> None:
    if how == "pause":
        start(cli, "idle", "--every", "1h", "--command", agent_command("--print", "x"))
        cli("pause", "idle", check=0)
    else:
        start(cli, "idle", "--every", "1h", "--command", agent_command("--decide", "complete"))
        cli("run", "idle", "--scheduled", check=0)
    before = len(cli.records("idle"))
    refused = cli("run", "idle")
    assert refused.returncode == 2, refused.stderr
    word = "paused" if how == "pause" else "completed"
    assert word in refused.stderr
    assert "loopctl run idle --force" in refused.stderr
    assert len(cli.records("idle")) == before
    forced = cli("run", "idle", "--force")
    assert forced.returncode == 0, forced.stderr
    records = cli.records("idle")
    assert len(records) == before + 1 and records[-1]["trigger"] == "manual"
