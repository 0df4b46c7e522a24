"""`logs -f` ends with the followed run's exit code (as `run` gives it), so
`loopctl logs -f NAME && next-step` does not go on after a failed run; a
run that had already ended is printed and its code given at once."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import CLI, agent_command, wait_for


def test_following_a_live_run_that_fails_exits_with_its_code(cli: CLI, tmp_path: Path) -> None:
    go = tmp_path / "go"
    cli("start", "p", "--name", "w", "--every", "1h", "--command",
        agent_command("--print", "working", "--wait-for", str(go), "--exit", "3"), check=0)
    runner = cli.popen("run", "w", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: list((cli.state_dir / "runs" / "w").glob("*.log")))
        follower = cli.popen("logs", "-f", "w", stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        go.touch()
        out, _ = follower.communicate(timeout=60)
        assert follower.returncode == 1 and "outcome failed" in out
    finally:
        runner.wait(timeout=60)


@pytest.mark.parametrize(("exit_code", "expected"), [(0, 0), (3, 1)])
def test_a_run_that_already_ended_gives_its_code_at_once(cli: CLI, exit_code: int,
                                                         expected: int) -> None:
    cli("start", "p", "--name", "w", "--every", "1h", "--command",
        agent_command("--exit", str(exit_code)), check=0)
    cli("run", "w", check=expected)
    proc = cli("logs", "-f", "w", timeout=20)
    assert proc.returncode == expected and "# loopctl: run" in proc.stdout
