"""`ls --json`, `status [NAME] --json`, the `ls` table and `decide` (every
agent's last command): what they print and write. They take the Typer
app's one route (issue 52, item 4); tests/cli/test_one_parser.py holds
every route of every command to the same parser."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CLI, agent_command, imported_modules, loopctl_argv

VIEWS = [["ls", "--json"], ["list", "--json"], ["status", "--json"],
         ["status", "v", "--json"], ["status", "--json", "v"]]


def without_clock(data: object) -> object:
    """The views minus the one field that moves with the clock between calls."""
    if isinstance(data, dict):
        return {k: without_clock(v) for k, v in data.items() if k != "deadline_remaining_s"}
    if isinstance(data, list):
        return [without_clock(v) for v in data]
    return data


def test_json_views_print_the_loop_objects(cli: CLI) -> None:
    """Every form of VIEWS on one home (one run for all of them)."""
    cli("start", "p", "--name", "v", "--every", "1h", "--command",
        agent_command("--print", "x"), check=0)
    cli("run", "v", check=0)
    for args in VIEWS:
        data = cli.json(*args)
        loops = data.get("loops", [data])
        assert data["version"] == 1 and [loop["name"] for loop in loops] == ["v"], args


@pytest.mark.parametrize("args", [["status", "nope", "--json"], ["status", "../x", "--json"]])
def test_json_view_errors_are_the_documented_ones(cli: CLI, args: list[str]) -> None:
    proc = cli(*args)
    assert proc.returncode == 4 and proc.stderr.startswith("loopctl: error: no such loop")
    assert "Traceback" not in proc.stderr


def test_the_ls_table_rows_agree_with_the_json_shape(cli: CLI) -> None:
    """`ls` reads its rows without building the JSON shape (10,000 loops);
    they must say what `ls --json` says, loop by loop."""
    from loopctl.commands import views as reading
    from loopctl.domain.timestamps import parse_iso
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


DECIDES = [
    ["decide", "complete", "--summary", "s", "--evidence", "e"],
    ["decide", "continue", "--next", "20m", "--evidence", "é", "--summary", ""],
    ["decide", "maybe", "--summary", "s"],           # exit 2, one line
    ["decide", "continue", "--next", "soon"],        # exit 2, one line
    ["decide", "fail", "--summary=s"],
    ["decide", "block", "--summary", "a", "--summary", "-b"],
]


@pytest.mark.parametrize("args", DECIDES, ids=lambda v: repr(v)[:40])
def test_decide_writes_the_decision_or_fails_in_one_line(
        tmp_path: Path, args: list[str]) -> None:
    """`loopctl decide` (every agent's last command), as a process: it
    writes the decision file and says so, or fails with one line, exit 2,
    and writes nothing."""
    decision = tmp_path / "decision.json"
    proc = subprocess.run(loopctl_argv(*args), capture_output=True, text=True,
                          env=dict(os.environ, LOOPCTL_DECISION_FILE=str(decision)))
    assert (proc.returncode, decision.exists()) in ((0, True), (2, False)), proc
    if proc.returncode == 0:
        assert proc.stdout == f"decision recorded: {args[1]}\n"
        assert json.loads(decision.read_text())["decision"] == args[1]
    else:
        assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr


def test_ls_prints_the_table(cli: CLI) -> None:
    assert cli("ls", check=0).stdout.startswith("no loops yet")
    cli("start", "p", "--name", "v", "--every", "1h", "--command",
        agent_command("--print", "x"), check=0)
    cli("run", "v", check=0)
    cli("pause", "v", check=0)
    for args in (["ls"], ["list"]):
        out = cli(*args, check=0).stdout
        assert "v " in out and "paused" in out, out


@pytest.mark.parametrize("argv", [["run", "t"], ["tick", "--wait"]])
def test_a_run_imports_no_typing(cli: CLI, argv: list[str]) -> None:
    """`typing` is a measured share of every run's start (bench/README.md):
    the modules a run imports, by hand or from a driver's pass, name it for
    mypy only."""
    cli("start", "x", "--name", "t", "--every", "1h", "--command", "true",
        "--sandbox", "off", check=0)
    cli("trigger", "t", check=0)
    code = ("import sys\nfrom loopctl.entry import main\n"
            f"sys.argv = ['loopctl', *{argv!r}]\n"
            "try:\n    main()\nexcept SystemExit as exc:\n    code = exc.code\n"
            "print('TYPING' if 'typing' in sys.modules else 'NO-TYPING', code, file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stderr.splitlines()[-1] == "NO-TYPING 0", proc.stderr


def test_a_run_without_notification_targets_imports_no_sender(cli: CLI) -> None:
    """The notification sender (integrations/notify.py) is imported only for
    a loop that has targets: not by the driver's pass that fires a plain
    loop, nor by its supervisor (whose imports `-X importtime` writes to
    the run's log); nor the PR-fix rules to read back a plain run's record."""
    cli("start", "x", "--name", "t", "--every", "1h", "--command", "true",
        "--sandbox", "off", check=0)
    cli("trigger", "t", check=0)
    driver = imported_modules("tick", "--wait")
    assert "loopctl.engine.supervisor" in driver  # it fired and waited
    assert not {"loopctl.integrations.notify", "loopctl.domain.feedback"} & set(driver)
    (log,) = (cli.home / "state" / "runs" / "t").glob("*.log")
    supervisor = [line.rsplit("|", 1)[1].strip() for line in log.read_text().splitlines()
                  if line.startswith("import time:")]
    assert supervisor and "loopctl.integrations.notify" not in supervisor
