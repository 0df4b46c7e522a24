"""A command run with `--json` that fails says so in JSON on stdout too:
`{"version": 1, "error": {"code": EXIT, "message": LINE}}`, beside the one
line on stderr, whichever path failed (a direct view, Typer, a bad option)."""

from __future__ import annotations

import json

import pytest

from conftest import CLI


@pytest.mark.parametrize(("args", "code"), [
    (["status", "nope", "--json"], 4),          # the Typer-free JSON view
    (["history", "nope", "--json"], 4),         # a Typer command
    (["ls", "--json", "--sort", "sideways"], 2),  # a bad value the command refuses
    (["ls", "--json", "--bogus"], 2),           # an option click does not know
])
def test_a_json_command_that_fails_prints_a_json_error(cli: CLI, args: list[str],
                                                       code: int) -> None:
    proc = cli(*args)
    said = proc.stderr.strip()
    assert proc.returncode == code and said.startswith("loopctl: error: ")
    assert json.loads(proc.stdout) == {
        "version": 1, "error": {"code": code, "message": said.removeprefix("loopctl: error: ")}}


def test_without_json_a_failure_leaves_stdout_empty(cli: CLI) -> None:
    proc = cli("history", "nope")
    assert proc.returncode == 4 and proc.stdout == "" and "no such loop" in proc.stderr


def test_a_prompt_that_says_json_after_a_separator_is_not_the_flag(cli: CLI) -> None:
    proc = cli("history", "nope", "--", "--json")
    assert proc.returncode != 0 and proc.stdout == ""
