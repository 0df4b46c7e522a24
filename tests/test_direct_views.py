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
    typer_code = "import sys\nfrom loopctl.cli.app import run_app\nrun_app(sys.argv[1:])"
    slow = subprocess.run([sys.executable, "-c", typer_code, *args], capture_output=True,
                          text=True)
    assert slow.returncode == 0, slow.stderr
    assert without_clock(json.loads(fast.stdout)) == without_clock(json.loads(slow.stdout))


@pytest.mark.parametrize("args", [["status", "nope", "--json"], ["status", "../x", "--json"]])
def test_json_view_errors_are_the_documented_ones(cli: CLI, args: list[str]) -> None:
    proc = cli(*args)
    assert proc.returncode == 4 and proc.stderr.startswith("loopctl: error: no such loop")
    assert "Traceback" not in proc.stderr


def test_the_ls_table_rows_agree_with_the_json_shape(cli: CLI) -> None:
    """`ls` reads its rows without building the JSON shape (10,000 loops);
    they must say what `ls --json` says, loop by loop."""
    from loopctl.commands import views as reading
    from loopctl.domain.schedule import parse_iso
    from loopctl.storage.store import Store

    cli("start", "p", "--name", "done", "--every", "1h", "--max-runs", "1", "--command",
        agent_command("--print", "x"), check=0)
    cli("run", "done", check=0)  # used its one run: ended
    cli("start", "p", "--name", "later", "--every", "1h", "--after", "1h", check=0)
    cli("start", "p", "--name", "held", "--cron", "*/5 * * * *", "--tz", "UTC", check=0)
    cli("pause", "held", check=0)
    loops_file = cli.home / "loops.yaml"
    loops_file.write_text(loops_file.read_text() + "  broken:\n    prompt: x\n    every: nope\n")
    full = {d["name"]: d for d in reading.list_loops(Store())}
    brief = reading.list_brief(Store())
    assert [b["name"] for b in brief] == list(full) == ["done", "later", "held", "broken"]
    for row in brief:
        whole = full[row["name"]]
        assert row["status"] == whole["status"]
        if row["status"] == "invalid":
            assert row["error"] == whole["error"]
            continue
        assert row["reason"] == whole["reason"]
        assert row["schedule"] == whole["schedule"]["text"]
        assert (row["used"], row["limit"]) == (whole["runs"]["used"], whole["runs"]["limit"])
        assert row["last_outcome"] == (whole["last_run"] or {}).get("outcome")
        if whole["next_fire"] is None:
            assert row["next_fire"] is None
        else:
            assert abs(row["next_fire"] - parse_iso(whole["next_fire"])) < 1
    assert {b["status"] for b in brief} >= {"paused", "active", "invalid"}
    assert brief[0]["status"] != "active" and brief[0]["last_outcome"] == "ok"
