"""A setting is declared once, as its row of the settings table
(domain/loop_settings.py): a row added with no other code change becomes a
`start` and an `update` option with its help, validated, written to and read
back from loops.yaml, listed in the LOOP JSON and documented by gendocs; and
every row reaches each place made from the table, none declared twice."""

from __future__ import annotations

import compileall
import inspect
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import loopctl
from loopctl.cli import define, setting_opts
from loopctl.commands import loop_object
from loopctl.domain import loop_settings
from loopctl.domain.model import KEYS, LoopDef
from loopctl.fast.data_class import fields
from loopctl.storage import defs_cache

PACKAGE = Path(loopctl.__file__).parent
# The one line a person adds to the table (what issue 52 asks to show).
NEW_ROW = ('    _s("max_quiet_runs", "count", "Runs in a row with no output before pausing '
           '(0 = unlimited).", plain=True),\n')
# And one with a context rule: it means nothing without a check.
RULED_ROW = ('    _s("check_retries", "count", "Runs of a failed check again before it fails '
             '(default 0).", plain=True, needs=("check",)),\n')


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the package whose table ends with NEW_ROW and RULED_ROW, and
    no other change; the folder to put first on PYTHONPATH."""
    src = tmp_path_factory.mktemp("with_rows") / "src"
    shutil.copytree(PACKAGE, src / "loopctl", ignore=shutil.ignore_patterns("__pycache__"))
    table = src / "loopctl" / "domain" / "loop_settings.py"
    text = table.read_text(encoding="utf-8")
    end = text.index("\n)\n\nBY_KEY")  # the table's closing parenthesis
    table.write_text(text[:end + 1] + NEW_ROW + RULED_ROW + text[end + 1:], encoding="utf-8")
    # Compiled once here: under PYTHONDONTWRITEBYTECODE (CI) each of the
    # test's ten processes compiled the whole copy again (~0.3 s of CPU each).
    compileall.compile_dir(str(src / "loopctl"), quiet=1)
    return src


def _run(src: Path, *args: str, module: str = "loopctl") -> subprocess.CompletedProcess[str]:
    # Not from the checkout: `-m` puts the working directory first on the path.
    env = dict(os.environ, PYTHONPATH=str(src))
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True,
                          text=True, env=env, timeout=300, cwd=src)


def _one_line_usage_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_a_row_added_alone_is_an_option_a_key_a_json_field_and_documented(
        src: Path, home: Path) -> None:
    where = subprocess.run([sys.executable, "-c", "import loopctl; print(loopctl.__file__)"],
                           capture_output=True, text=True, cwd=src,
                           env=dict(os.environ, PYTHONPATH=str(src)))
    assert where.stdout.startswith(str(src)), where  # the copy runs, not the checkout
    for command in ("start", "update"):
        shown = _run(src, command, "--help")
        assert shown.returncode == 0, shown.stderr
        assert "--max-quiet-runs" in shown.stdout and "no output before pausing" in shown.stdout

    # Validated by the row's rule: one line, exit 2, nothing written.
    bad = _run(src, "start", "p", "--name", "q", "--every", "1h", "--max-quiet-runs", "-1")
    assert "--max-quiet-runs" in _one_line_usage_error(bad)
    assert not (home / "loops.yaml").exists()

    made = _run(src, "start", "p", "--name", "q", "--every", "1h", "--max-quiet-runs", "4")
    assert made.returncode == 0, made.stderr
    assert "max_quiet_runs: 4" in (home / "loops.yaml").read_text()
    listed = _run(src, "ls", "--json")
    assert listed.returncode == 0, listed.stderr
    assert '"max_quiet_runs": 4' in listed.stdout.replace('":4', '": 4')
    status = _run(src, "status", "q", "--json")
    assert '"max_quiet_runs": 4' in status.stdout.replace('":4', '": 4'), status.stdout

    changed = _run(src, "update", "q", "--max-quiet-runs", "7")
    assert changed.returncode == 0, changed.stderr
    assert "max_quiet_runs: 7" in (home / "loops.yaml").read_text()
    before = (home / "loops.yaml").read_text()
    refused = _run(src, "update", "q", "--max-quiet-runs", "x")
    assert "--max-quiet-runs" in _one_line_usage_error(refused)
    assert (home / "loops.yaml").read_text() == before  # nothing overwritten

    # Read back by the row's rule: a hand edit it refuses names the key.
    (home / "loops.yaml").write_text(before.replace("max_quiet_runs: 7", "max_quiet_runs: -3"))
    checked = _run(src, "validate")
    assert checked.returncode != 0 and "max_quiet_runs" in checked.stdout + checked.stderr

    _generate_docs(src)
    commands = (src / "docs" / "commands.md").read_text()
    sections = {part.split("\n", 1)[0]: part for part in commands.split("\n## ")}
    for command in ("start", "update"):
        assert "- `--max-quiet-runs MAX_QUIET_RUNS`: Runs in a row with no output" in \
            sections[command], command
    assert "max_quiet_runs" in (src / "docs" / "loops-yaml.md").read_text()
    assert "max\\-quiet\\-runs" in (src / "man" / "loopctl.1").read_text()


def _generate_docs(src: Path) -> None:
    if not (src / "docs" / "commands.md").exists():  # once for the module's copy
        docs = _run(src, module="loopctl.cli.gendocs")
        assert docs.returncode == 0, docs.stderr


def test_a_row_with_a_context_rule_is_checked_the_same_from_both_routes(
        src: Path, home: Path) -> None:
    """RULED_ROW's `needs`: refused on the command line naming the options,
    in loops.yaml naming the keys; cleared with what it needs; documented."""
    start = ("start", "p", "--name", "r", "--every", "1h")
    alone = _run(src, *start, "--check-retries", "2")
    assert _one_line_usage_error(alone).endswith("error: --check-retries needs --check")
    assert not (home / "loops.yaml").exists()

    made = _run(src, *start, "--check", "true", "--check-retries", "2")
    assert made.returncode == 0, made.stderr
    assert "check_retries: 2" in (home / "loops.yaml").read_text()
    changed = _run(src, "update", "r", "--check-retries", "3")
    assert changed.returncode == 0 and "check_retries 3" in changed.stdout, changed.stderr
    cleared = _run(src, "update", "r", "--check", "none")  # what needs it goes with it
    assert cleared.returncode == 0, cleared.stderr
    assert "check" not in (home / "loops.yaml").read_text().split("loops:")[1]
    refused = _run(src, "update", "r", "--check-retries", "1")
    assert _one_line_usage_error(refused).endswith("error: --check-retries needs --check")

    text = (home / "loops.yaml").read_text()
    (home / "loops.yaml").write_text(text.replace("    cwd:", "    check_retries: 1\n    cwd:"))
    checked = _run(src, "validate")
    assert checked.returncode == 2, checked
    assert "invalid: loop 'r': 'check_retries' needs 'check'" in checked.stdout

    _generate_docs(src)
    commands = (src / "docs" / "commands.md").read_text()
    assert "- `--check-retries CHECK_RETRIES`: Runs of a failed check again" in commands
    reference = (src / "docs" / "loops-yaml.md").read_text()
    assert "| `check_retries` |" in reference
    assert "before it fails (default 0). Needs 'check'. |" in reference
    assert "Needs 'check'." in (src / "man" / "loops.yaml.5").read_text()


def _rows_with_options(command: str) -> list[loop_settings.Setting]:
    return [s for s in loop_settings.for_command(command) if s.flags]


def test_every_row_reaches_each_place_made_from_the_table() -> None:
    names = set(fields(LoopDef))
    assert set(KEYS) == set(loop_settings.KEYS) == {s.key for s in loop_settings.SETTINGS}
    for setting in loop_settings.SETTINGS:
        assert setting.name in names or setting.plain, setting.key  # a field, or held in `more`
        if setting.view:
            assert setting.name in defs_cache.LISTED, setting.key
    # A composing view names a documented field of the LOOP object.
    written = set(_documented_fields())
    for setting in loop_settings.SETTINGS:
        if setting.view not in (None, "own"):
            assert setting.view in written, (setting.key, setting.view)
    for command in ("start", "update"):
        params = inspect.signature(getattr(define, command)).parameters
        for setting in _rows_with_options(command):
            assert setting.python in params, (command, setting.key)
            info = params[setting.python].annotation.__metadata__[0]
            wanted = setting.update_help if command == "update" and setting.update_help \
                else setting.help
            declared = (info.default, *info.param_decls)  # Typer keeps the first as `default`
            assert (declared, info.help) == (setting.flags, wanted), setting.key


def _documented_fields() -> list[str]:
    """The LOOP object's field names, from a read of no loops."""
    def column(_: str) -> list[object]:
        return []
    return list(loop_object.columns(column, column, [], 0.0))


def test_nothing_is_declared_twice() -> None:
    flags = [f for s in loop_settings.SETTINGS for flag in s.flags for f in flag.split("/")]
    assert len(flags) == len(set(flags)), sorted({f for f in flags if flags.count(f) > 1})
    assert len(setting_opts.HELP_ORDER) == len(set(setting_opts.HELP_ORDER))
    own = {"new_objective"}  # `update`'s own acknowledgement, not a setting
    assert set(setting_opts.HELP_ORDER) <= set(loop_settings.KEYS) | own
    # No module of the CLI declares an option of a row by hand, nor copies
    # a row's help: the row is the one place either is written.
    cli = PACKAGE / "cli"
    for path in sorted(cli.glob("*.py")):
        source = path.read_text(encoding="utf-8")
        for setting in loop_settings.SETTINGS:
            for flag in (f for f in setting.flags for f in f.split("/")):
                assert f'Option("{flag}"' not in source, (path.name, flag)
            if len(setting.help) > 30 and path.name != "setting_opts.py":
                assert setting.help not in source, (path.name, setting.key)


@pytest.mark.parametrize("command", ["start", "update"])
def test_help_lists_each_row_option_once(command: str) -> None:
    from typer.main import get_command

    from loopctl.cli.app import app

    group = get_command(app)
    params = group.get_command(None, command).params  # type: ignore[attr-defined]
    opts = [o for p in params for o in (*p.opts, *p.secondary_opts)]
    assert len(opts) == len(set(opts))
    for setting in _rows_with_options(command):
        assert setting.option in opts, setting.key
