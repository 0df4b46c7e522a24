"""`--umask N` / `umask:` (an example of a setting added as one row plus its
behaviour): the files a run's agent and check create take the loop's mask."""

from __future__ import annotations

import stat
from pathlib import Path

from conftest import CLI


def test_files_the_agent_and_its_check_create_take_the_loops_umask(cli: CLI,
                                                                   tmp_path: Path) -> None:
    agent, check = tmp_path / "agent", tmp_path / "check"
    cli("start", "--name", "masked", "--every", "1h", "--umask", str(0o077),
        "--command", f"touch {agent}", "--check", f"touch {check}", check=0)
    cli("run", "masked", check=0)
    assert stat.S_IMODE(agent.stat().st_mode) == 0o600
    assert stat.S_IMODE(check.stat().st_mode) == 0o600


def test_umask_in_loops_yaml_and_its_one_rule(cli: CLI, home: Path) -> None:
    cli("start", "--name", "m", "--every", "1h", "--umask", "18", "--command", "true", check=0)
    assert "umask: 18" in (home / "loops.yaml").read_text()
    bad = cli("update", "m", "--umask", "512")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "--umask" in bad.stderr and "umask: 18" in (home / "loops.yaml").read_text()
