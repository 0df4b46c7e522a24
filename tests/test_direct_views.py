"""`ls --json` and `status [NAME] --json` skip Typer (what scripts and
dashboards poll most often), and print exactly what the Typer commands print."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import CLI, agent_command

VIEWS = [["ls", "--json"], ["list", "--json"], ["status", "--json"],
         ["status", "v", "--json"], ["status", "--json", "v"]]


def without_clock(data: object) -> object:
    """The views minus the one field that moves with the clock between calls."""
    if isinstance(data, dict):
        return {k: without_clock(v) for k, v in data.items() if k != "deadline_remaining_s"}
    if isinstance(data, list):
        return [without_clock(v) for v in data]
    return data


@pytest.mark.parametrize("args", VIEWS)
def test_json_views_match_the_typer_commands_and_skip_typer(cli: CLI, args: list[str]) -> None:
    cli("start", "p", "--name", "v", "--every", "1h", "--command",
        agent_command("--print", "x"), check=0)
    cli("run", "v", check=0)
    code = ("import sys\nfrom loopctl.entry import main\nsys.argv = ['loopctl', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('TYPER' if 'typer' in sys.modules else 'NO-TYPER', file=sys.stderr)")
    fast = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                          text=True, check=True)
    assert fast.stderr.strip().splitlines()[-1] == "NO-TYPER"
    typer_code = "import sys\nfrom loopctl.cli import run_app\nrun_app(sys.argv[1:])"
    slow = subprocess.run([sys.executable, "-c", typer_code, *args], capture_output=True,
                          text=True)
    assert slow.returncode == 0, slow.stderr
    assert without_clock(json.loads(fast.stdout)) == without_clock(json.loads(slow.stdout))


@pytest.mark.parametrize("args", [["status", "nope", "--json"], ["status", "../x", "--json"]])
def test_json_view_errors_are_the_documented_ones(cli: CLI, args: list[str]) -> None:
    proc = cli(*args)
    assert proc.returncode == 4 and proc.stderr.startswith("loopctl: error: no such loop")
    assert "Traceback" not in proc.stderr
