"""Docs that cannot drift: README set-up commands, help and a section per command."""

from __future__ import annotations

import re

import pytest
import typer

from conftest import TESTS
from loopctl.cli.app import app

# The CLI's behaviour as a process is the subject: `start` too runs as one.
pytestmark = pytest.mark.real_processes

ROOT = TESTS.parent
README = (ROOT / "README.md").read_text()
COMMANDS = typer.main.get_command(app).commands  # type: ignore[attr-defined]
ALIASES = {"list": "ls"}


def setup_commands() -> list[str]:
    section = README.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", section)


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one() -> None:
    commands = setup_commands()
    assert len(commands) == 2
    assert "pytest" in commands[1]
    assert commands[1] in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_help_and_a_readme_section(name: str) -> None:
    command = COMMANDS[name]
    assert (command.help or "").strip(), f"{name} has no help text"
    assert f"### {ALIASES.get(name, name)}\n" in README, f"README has no section for {name}"


def test_help_lists_every_command_summary_whole() -> None:
    """Click cuts a summary to fit its column (`Install ... that runs...`):
    each line of `--help`'s command list ends a sentence, not mid-word."""
    from typer.testing import CliRunner

    runner = CliRunner()
    for argv in ([], ["cron"], ["notify"]):
        shown = runner.invoke(app, [*argv, "--help"], env={"COLUMNS": "80"}).output
        listed = shown.split("Commands:", 1)[1]
        assert "..." not in listed, (argv, listed)
    summary = {c.name: c.get_short_help_str(45) for c in COMMANDS.values()}
    assert summary["update"].endswith("(limits are absolute; --for counts from the start).")
    assert summary["cron"].endswith("runs `loopctl tick`.")


def test_the_readme_systemd_unit_can_be_enabled() -> None:
    """`systemctl --user enable` needs an [Install] section to link the unit."""
    unit = README.split("**How do I run the daemon under systemd?**", 1)[1]
    unit = unit.split("```ini\n", 1)[1].split("```", 1)[0]
    assert "[Install]" in unit and "WantedBy=default.target" in unit
    assert "ExecStart=" in unit and "loopctl daemon" in unit


def test_the_setup_example_leaves_no_live_loop_and_the_tour_finds_loopctl() -> None:
    """The main-job example is one command that ends with a one-off loop (a
    7-day `hello` firing every 10 minutes was left behind), and the README
    says how the tour's bare `loopctl` is found."""
    main_job = setup_commands()[0]
    assert " --max-runs 1 " in main_job and main_job.count("&&") == 4
    assert ".venv/bin/loopctl tick --wait" in main_job
    assert ". .venv/bin/activate" in README.split("## A 60-second tour", 1)[0]
