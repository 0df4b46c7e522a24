"""`--nice N` / `nice:`: the run's processes (agent, gate, check) take the
loop's niceness; a plain bound, added as one row of the settings table."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import CLI
from loopctl.domain.errors import UsageError
from loopctl.domain.loop_raw import to_raw
from loopctl.domain.model import parse_loop

# The niceness field of /proc/PID/stat, read by the command itself.
READ_NICE = "sh -c 'cut -d\" \" -f19 /proc/self/stat > {out}; cut -d\" \" -f19 /proc/self/stat'"


@pytest.mark.parametrize("mode", ["run", "tick"])
def test_the_agent_and_its_check_run_at_the_loops_niceness(cli: CLI, tmp_path: Path,
                                                             mode: str) -> None:
    agent, check = tmp_path / "agent", tmp_path / "check"
    base = os.getpriority(os.PRIO_PROCESS, 0)
    level = min(base + 7, 19)
    cli("start", "--name", "low", "--every", "1h", "--nice", str(level),
        "--command", READ_NICE.format(out=agent), "--check", READ_NICE.format(out=check),
        check=0)
    cli(*(["run", "low"] if mode == "run" else ["tick", "--wait"]), check=0)
    assert int(agent.read_text()) == level
    assert int(check.read_text()) == level


def test_nice_in_loops_yaml_status_update_and_its_one_rule(cli: CLI, home: Path) -> None:
    cli("start", "--name", "b", "--every", "1h", "--nice", "5", "--command", "true", check=0)
    assert "nice: 5" in (home / "loops.yaml").read_text()
    assert "nice 5" in cli("status", "b", check=0, env={"COLUMNS": "300"}).stdout
    bad = cli("update", "b", "--nice", "20")
    assert bad.returncode == 2
    assert bad.stderr.strip() == ("loopctl: error: bad --nice '20': expected a whole number "
                                  "from 0 to 19 or 'none'"), bad.stderr
    cli("update", "b", "--nice", "none", check=0)
    assert "nice" not in (home / "loops.yaml").read_text()
    loop = parse_loop("b", {"command": ["true"], "every": "1h", "nice": 19})
    assert loop.nice == 19 and parse_loop("b", to_raw(loop)) == loop
    with pytest.raises(UsageError, match="'nice' must be a whole number from 0 to 19"):
        parse_loop("b", {"command": ["true"], "every": "1h", "nice": -1})
