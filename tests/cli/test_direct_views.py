"""`ls --json` and `status [NAME] --json` (what scripts and dashboards poll
most often) and `decide` (every agent's last command) skip Typer, and do
exactly what the Typer commands do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CLI, agent_command, imported_modules

VIEWS = [["ls", "--json"], ["list", "--json"], ["status", "--json"],
         ["status", "v", "--json"], ["status", "--json", "v"]]


def without_clock(data: object) -> object:
    """The views minus the one field that moves with the clock between calls."""
    if isinstance(data, dict):
        return {k: without_clock(v) for k, v in data.items() if k != "deadline_remaining_s"}
    if isinstance(data, list):
        return [without_clock(v) for v in data]
    return data


def test_json_views_match_the_typer_commands_and_skip_typer(cli: CLI) -> None:
    """Every form of VIEWS on one home (one run for all of them)."""
    cli("start", "p", "--name", "v", "--every", "1h", "--command",
        agent_command("--print", "x"), check=0)
    cli("run", "v", check=0)
    code = ("import sys\nfrom loopctl.entry import main\nsys.argv = ['loopctl', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('TYPER' if 'typer' in sys.modules else 'NO-TYPER', file=sys.stderr)")
    typer_code = "import sys\nfrom loopctl.cli.app import run_app\nrun_app(sys.argv[1:])"
    for args in VIEWS:
        fast = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                              text=True, check=True)
        assert fast.stderr.strip().splitlines()[-1] == "NO-TYPER", args
        slow = subprocess.run([sys.executable, "-c", typer_code, *args], capture_output=True,
                              text=True)
        assert slow.returncode == 0, (args, slow.stderr)
        assert without_clock(json.loads(fast.stdout)) == without_clock(json.loads(slow.stdout)), \
            args


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
    (["decide", "complete", "--summary", "s", "--evidence", "e"], False),
    (["decide", "continue", "--next", "20m", "--evidence", "é", "--summary", ""], False),
    (["decide", "maybe", "--summary", "s"], False),           # exit 2, one line
    (["decide", "continue", "--next", "soon"], False),        # exit 2, one line
    (["decide", "fail", "--summary=s"], True),                # other spellings: Typer
    (["decide", "block", "--summary", "a", "--summary", "-b"], True),
]


def typer_in_process(args: list[str]) -> tuple[int, str, list[str]]:
    """The Typer command itself (`run_app`), in this process."""
    import contextlib
    import io

    from loopctl.cli.app import run_app

    out, err = io.StringIO(), io.StringIO()
    code: object = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            run_app(args)
    except SystemExit as exc:
        code = exc.code
    return int(code or 0), out.getvalue(), err.getvalue().splitlines()


@pytest.mark.parametrize(("args", "typer_parses"), DECIDES, ids=lambda v: repr(v)[:40])
def test_decide_skips_typer_and_does_what_the_typer_command_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str],
        typer_parses: bool) -> None:
    """`loopctl decide` (every agent's last command) in its plain form skips
    Typer; it writes the same decision file, prints the same text and fails
    with the same one line and exit code as the Typer command."""
    code = ("import sys\nfrom loopctl.entry import main\nsys.argv = ['loopctl', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit as exc:\n    code = exc.code\n"
            "print('TYPER' if 'typer' in sys.modules else 'NO-TYPER', file=sys.stderr)\n"
            "sys.exit(code)")
    fast_file, typer_file = tmp_path / "fast.json", tmp_path / "typer.json"
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=dict(os.environ, LOOPCTL_DECISION_FILE=str(fast_file)))
    lines = proc.stderr.splitlines()
    assert lines.pop() == ("TYPER" if typer_parses else "NO-TYPER"), proc.stderr
    monkeypatch.setenv("LOOPCTL_DECISION_FILE", str(typer_file))
    reference = typer_in_process(args[:])
    assert (proc.returncode, proc.stdout, lines) == reference
    written = [f.read_text() if f.exists() else None for f in (fast_file, typer_file)]
    assert written[0] == written[1]
    assert (proc.returncode, bool(written[0])) in ((0, True), (2, False)), proc
    assert proc.stdout.startswith("decision recorded: ") if proc.returncode == 0 \
        else len(lines) == 1


def test_plain_ls_skips_typer_and_prints_what_the_typer_command_prints(cli: CLI) -> None:
    code = ("import sys\nfrom loopctl.entry import main\nsys.argv = ['loopctl', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('TYPER' if 'typer' in sys.modules else 'NO-TYPER', file=sys.stderr)")
    typer_code = "import sys\nfrom loopctl.cli.app import run_app\nrun_app(sys.argv[1:])"

    def both(args: list[str]) -> tuple[str, str]:
        fast = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                              text=True, check=True)
        assert fast.stderr.strip().splitlines()[-1] == "NO-TYPER", args
        slow = subprocess.run([sys.executable, "-c", typer_code, *args], capture_output=True,
                              text=True, check=True)
        return fast.stdout, slow.stdout

    fast, slow = both(["ls"])
    assert fast == slow and fast.startswith("no loops yet"), fast
    cli("start", "p", "--name", "v", "--every", "1h", "--command",
        agent_command("--print", "x"), check=0)
    cli("run", "v", check=0)
    cli("pause", "v", check=0)  # no NEXT that moves with the clock between the two
    for args in (["ls"], ["list"]):
        fast, slow = both(args)
        assert fast == slow and "v " in fast and "paused" in fast, (fast, slow)


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
