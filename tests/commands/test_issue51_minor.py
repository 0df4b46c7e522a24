"""Issue 51, "a newcomer's first hour, round 4": the minor items, one test
(or a few) each, through real `loopctl` processes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import CLI, agent_command


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


# -- item 22: `events NAME` of no loop ------------------------------------------


def test_events_of_no_such_loop_is_exit_4_like_status_and_logs(cli: CLI) -> None:
    for args in (("events", "nope"), ("events", "--follow", "nope"),
                 ("events", "nope", "--json")):
        proc = cli(*args, timeout=20)
        assert proc.returncode == 4, (args, proc.stdout, proc.stderr)
        assert "no such loop: 'nope'" in one_line(proc)
        assert "no attention events yet" not in proc.stdout
    assert cli("events", "../x").returncode == 2


def test_a_removed_loops_past_events_are_still_shown(cli: CLI) -> None:
    cli("start", "p", "--name", "once", "--every", "1h", "--max-runs", "1", "--command",
        agent_command(), check=0)
    cli("run", "once", check=0)
    shown = cli("events", "once", check=0).stdout
    assert "once" in shown and "no attention events yet" not in shown
    cli("rm", "once", check=0)
    assert cli("events", "once", check=0).stdout == shown


# -- item 23: the option typed is the one named ----------------------------------


def test_a_bad_address_names_the_option_typed(cli: CLI) -> None:
    daemon = cli("daemon", "--serve", ":abc", timeout=30)
    assert daemon.returncode == 2
    assert one_line(daemon).startswith("loopctl: error: bad --serve ':abc'")
    served = cli("serve", "--bind", ":abc", timeout=30)
    assert served.returncode == 2
    assert one_line(served).startswith("loopctl: error: bad --bind ':abc'")
    assert not (cli.state_dir / "lease.json").exists()  # the daemon never started


# -- item 21: which cron field, and why ------------------------------------------


@pytest.mark.parametrize("expr, words", [
    ("61 * * * *", "minute 61 is out of range 0-59"),
    ("* 24 * * *", "hour 24 is out of range 0-23"),
    ("0 0 0 * *", "day 0 is out of range 1-31"),
    ("* * * 13 *", "month 13 is out of range 1-12"),
    ("*/5 * * * 9", "weekday 9 is out of range 0-7"),
    ("1-70 * * * *", "minute 70 is out of range 0-59"),
    ("x * * * *", "the minute field 'x' is not valid"),
    ("* * * * " + "9" * 5000, "weekday 99999"),
])
def test_a_bad_cron_field_is_named_with_its_range(expr: str, words: str) -> None:
    from loopctl.domain.checks import check_cron
    from loopctl.domain.errors import UsageError

    with pytest.raises(UsageError) as caught:
        check_cron(expr, "--cron")
    assert words in caught.value.message and "\n" not in caught.value.message


def test_start_says_which_cron_field_is_out_of_range(cli: CLI) -> None:
    proc = cli("start", "p", "--name", "a", "--agent", "shell", "--cron", "61 * * * *")
    assert proc.returncode == 2
    assert one_line(proc) == "loopctl: error: bad --cron '61 * * * *': minute 61 is out of " \
        "range 0-59"


# -- items 4 and 5: how to install an agent; what `agents` calls confined -------


def test_every_agent_preset_says_how_to_install_it() -> None:
    from loopctl.agents.presets import INSTALL, PRESETS

    assert set(INSTALL) == set(PRESETS) - {"shell"}
    assert all("\n" not in command for command in INSTALL.values())


def test_a_missing_claude_names_its_package_at_start_agents_doctor_and_in_the_run(
        cli: CLI) -> None:
    package = "npm install -g @anthropic-ai/claude-code"
    started = cli("start", "p", "--name", "c", "--agent", "claude", "--every", "1h", check=0)
    assert package in started.stderr
    rows = {row["preset"]: row for row in cli.json("agents")["agents"]}
    assert rows["claude"]["install"] == package and rows["shell"]["install"] is None
    assert f"    install: {package}" in cli("agents").stdout.splitlines()
    doctor = json.loads(cli("doctor", "--json", check=1).stdout)  # unhealthy: no claude
    [finding] = [f for f in doctor["findings"] if f["check"] == "agents"]
    assert package in finding["message"]
    cli("run", "c", check=1)
    [record] = cli.records("c")
    assert record["note"] == f"agent not found on PATH: claude; install it: `{package}`"


def test_a_missing_command_gets_no_preset_install_hint(cli: CLI) -> None:
    started = cli("start", "p", "--name", "c", "--every", "1h", "--command", "claude -p x",
                  check=0)
    assert "install it" not in started.stderr
    cli("run", "c", check=1)
    assert "install it" not in cli.records("c")[0]["note"]


def test_agents_calls_the_shell_preset_unconfined_by_default(cli: CLI) -> None:
    lines = cli("agents").stdout.splitlines()
    shell = lines.index(next(line for line in lines if line.startswith("shell ")))
    block = lines[shell + 1:shell + 3]
    assert any(line.startswith("    unconfined (--sandbox auto); with --sandbox on, may write")
               for line in block), block
    assert not any("    confined" in line for line in block)
    claude = lines.index(next(line for line in lines if line.startswith("claude ")))
    assert any(line.startswith("    confined, may write") for line in lines[claude:claude + 5])
    rows = {row["preset"]: row for row in cli.json("agents")["agents"]}
    assert rows["shell"]["confined_by_default"] is False
    assert rows["claude"]["confined_by_default"] is True


# -- item 9: `run` of a Claude loop prints the result, not the envelope ----------


def test_run_of_a_claude_loop_prints_its_result_text_and_logs_the_envelope(
        cli: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import TESTS

    monkeypatch.setenv("PATH", f"{TESTS / 'bin'}{os.pathsep}{os.environ['PATH']}")
    cli("start", "p", "--name", "c", "--agent", "claude", "--every", "1h", "--env",
        "FAKE_RESULT=fixed the \x1b[31mflaky\x1b[0m test\nand said so", check=0)
    proc = cli("run", "c", check=0)
    assert proc.stdout == "fixed the flaky test\nand said so\n", proc.stdout
    assert "total_cost_usd" not in proc.stdout and "\x1b" not in proc.stdout
    log = Path(cli.records("c")[0]["log"]).read_text()
    assert '"total_cost_usd"' in log  # the envelope, whole, in the log


def test_run_of_a_shell_loop_still_streams_its_output(cli: CLI) -> None:
    cli("start", "echo streamed", "--name", "s", "--every", "1h", check=0)
    assert cli("run", "s", check=0).stdout == "streamed\n"


# -- item 20: an unclosed quote is reported where it began -----------------------


@pytest.mark.parametrize("quote", ['"', "'"])
def test_an_unclosed_quote_is_reported_where_the_scalar_began(cli: CLI, quote: str) -> None:
    (cli.home).mkdir(parents=True, exist_ok=True)
    (cli.home / "loops.yaml").write_text(
        f"version: 1\nloops:\n  a:\n    prompt: {quote}unclosed\n    every: 1h\n"
        "  b:\n    prompt: x\n    every: 1h\n")
    proc = cli("validate")
    assert proc.returncode == 3
    said = one_line(proc)
    assert "loops.yaml, line 4, column 13: not valid YAML: a quoted scalar that starts here " \
           "is not closed" in said, said


def test_a_block_mapping_error_keeps_its_own_line(cli: CLI) -> None:
    (cli.home).mkdir(parents=True, exist_ok=True)
    (cli.home / "loops.yaml").write_text(
        "version: 1\nloops:\n  a:\n    prompt: x\n    every: 1h\n  - b\n")
    said = one_line(cli("validate", check=3))
    assert "loops.yaml, line 6: not valid YAML" in said and "starts here" not in said


# -- item 8: `status` wraps its limits line ----------------------------------------


@pytest.mark.parametrize("columns", ["80", "50"])
def test_status_wraps_the_limits_line_and_cuts_none(cli: CLI, columns: str) -> None:
    cli("start", "p", "--name", "a", "--agent", "shell", "--every", "1h", "--max-memory", "2GiB",
        check=0)
    out = cli("status", "a", env={"COLUMNS": columns}, check=0).stdout
    assert all(len(row) <= int(columns) for row in out.splitlines()), out
    assert "…" not in out
    rows = out.splitlines()
    first = next(i for i, row in enumerate(rows) if row.startswith("  limits     "))
    block = [rows[first]] + [row for row in rows[first + 1:first + 4]
                             if row.startswith(" " * 13)]
    said = " ".join(" ".join(block).split())
    for limit in ("timeout 1h", "log 100MiB", "output lines none", "memory 2GiB", "procs none",
                  "nice none"):
        assert limit in said, out


# -- item 24: `ls` at 80 columns keeps an invalid entry's reason whole -----------


def test_ls_at_80_columns_shows_an_invalid_entrys_reason_whole(cli: CLI) -> None:
    cli.home.mkdir(parents=True, exist_ok=True)
    (cli.home / "loops.yaml").write_text(
        "version: 1\nloops:\n  broken-one:\n    prompt: x\n    every: \"every ten minutes\"\n"
        "  fine:\n    prompt: x\n    every: 1h\n")
    out = cli("ls", env={"COLUMNS": "80"}, check=0).stdout
    assert all(len(row) <= 80 for row in out.splitlines()), out
    said = " ".join(out.split("invalid broken-one: ", 1)[1].split())
    assert "expected a duration like 45s" in said and "(line 5)" in said, out
    wide = cli("ls", env={"COLUMNS": "300"}, check=0).stdout
    assert "invalid broken-one:" not in wide  # whole in its cell: said once
