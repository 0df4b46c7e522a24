"""`start` and `update` write no setting as a parameter of their own: their
options come from the settings table and the option groups, so a new setting
is a row (or a group entry), not a parameter added to two long signatures."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from loopctl.cli import define

# What each command is about, not a setting: the loop's name, the prompt as an
# argument (start), the objective's acknowledgement (update), and --json.
OWN = {
    "start": {"prompt", "name", "as_json", "settings"},
    "update": {"name", "new_objective", "as_json", "settings"},
}


def _written_parameters(command: str) -> set[str]:
    tree = ast.parse(Path(define.__file__).read_text(encoding="utf-8"))
    func = next(node for node in ast.walk(tree)
                if isinstance(node, ast.FunctionDef) and node.name == command)
    args = func.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    return set(names) | ({args.kwarg.arg} if args.kwarg else set())


def test_start_and_update_write_only_their_own_parameters() -> None:
    for command, own in OWN.items():
        assert _written_parameters(command) == own, command


def test_every_row_option_reaches_the_commands() -> None:
    """The options Typer sees are the written ones plus every row's that the
    command takes: none is lost on the way."""
    from loopctl.domain.loop_settings import for_command

    for command in OWN:
        seen = set(inspect.signature(getattr(define, command)).parameters)
        wanted = {s.python for s in for_command(command) if s.flags}
        assert wanted <= seen, (command, wanted - seen)
        assert {"every", "max_runs", "timeout", "nice"} <= seen, command
