"""Each value of a setting is parsed once (issue 52): `start` and `update`
hand their options on as given, and `model.parse_loop` reads them (by the
reader of the row's kind, `setting_rules.read`, or the row's own rule),
naming each key by its option. The modules that turn options into keys
call none of those readers: a second parse there is what this forbids
(it once checked a duration in the CLI, dropped the result, and parsed the
text again in the model, in other words)."""

from __future__ import annotations

import ast
from pathlib import Path

import loopctl

CLI = Path(loopctl.__file__).parent / "cli"
# Where start/update turn options into loops.yaml keys.
TRANSLATORS = ("define.py", "setting_opts.py", *sorted(
    p.name for p in CLI.glob("*_opts.py")))
# The readers of settings' values, whoever wraps them.
READERS = {"parse_setting", "parse_duration", "parse_size", "check_regex", "parse_verify",
           "parse_gate", "parse_github", "check_cron", "check_tz", "check_sandbox_mode",
           "read", "problem", "parse_loop", "duration"}
# Not a setting's value: `problem` of a --protect pattern is the pattern's
# rule before git is asked about it (domain/protect.py).
ALLOWED = {("protect_opts.py", "problem")}


def _called(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def test_the_translators_of_options_parse_no_value() -> None:
    assert len(TRANSLATORS) > 5  # the glob found the *_opts modules
    for name in TRANSLATORS:
        found = {called for called in _called(CLI / name) & READERS
                 if (name, called) not in ALLOWED}
        assert not found, (name, sorted(found))
