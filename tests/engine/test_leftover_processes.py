"""Processes an agent leaves behind when it exits normally (procs.kill_tree).

An agent may exit 0 and leave a grandchild running: one that called
setsid() and lost its parent, so it is in neither the agent's process group
nor its tree. The supervisor is a subreaper (it adopts such orphans), and
after the agent exits it kills every descendant it still has: SIGTERM, then
SIGKILL after the grace (min(LOOPCTL_KILL_GRACE, 2 s); conftest sets 2) for
one that ignores SIGTERM. The run itself stays `ok`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from faults.support import gone, in_flight
from process_support import ignores_term, kill_leftovers, pids_in

from conftest import CLI, agent_command, wait_for


@pytest.fixture(autouse=True)
def reap(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftovers(tmp_path)


def launch(cli: CLI, how: str) -> subprocess.Popen[str] | None:
    """Fire the loop by a scheduled tick (a forked supervisor) or by
    `loopctl run` (the supervisor in the foreground)."""
    if how == "tick":
        cli("tick", check=0)
        return None
    return cli.popen("run", "leaver", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.parametrize("how", ["tick", "run"])
@pytest.mark.parametrize("agent_args", [(), ("--ignore-term",)],
                         ids=["leftover-obeys-sigterm", "leftover-ignores-sigterm"])
def test_a_grandchild_left_by_an_agent_that_exits_0_is_killed(
        cli: CLI, tmp_path: Path, how: str, agent_args: tuple[str, ...]) -> None:
    pid_file, gate = tmp_path / "pids", tmp_path / "gate"
    # The agent waits for the gate so the test can see the grandchild alive
    # first; then it exits 0, leaving the grandchild asleep for minutes.
    cli("start", "p", "--name", "leaver", "--every", "1h",
        "--env", f"FAKE_AGENT_PIDS={pid_file}",
        "--command", agent_command(*agent_args, "--grandchild", "120",
                                   "--wait-for", str(gate), "--exit", "0"), check=0)
    foreground = launch(cli, how)
    run = wait_for(lambda: in_flight(cli, "leaver"))
    (grandchild,) = wait_for(lambda: pids_in(pid_file))
    assert not gone(grandchild)
    # With --ignore-term only SIGKILL can end it: its death proves the escalation.
    assert ignores_term(grandchild) is bool(agent_args)

    gate.touch()
    (record,) = wait_for(lambda: cli.records("leaver"), timeout=20)
    assert (record["outcome"], record["exit_code"]) == ("ok", 0), record
    # The record is written after the kill: the wait covers only the kernel
    # finishing off a SIGKILLed process.
    wait_for(lambda: gone(grandchild) and gone(run["agent"]["pid"]), timeout=5)
    assert "killed 1 leftover process(es)" in (record["note"] or ""), record
    if foreground is not None:
        assert foreground.wait(timeout=20) == 0
