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
