"""The one error path (loopctl/cli/failure.py, DESIGN §8 and §11): a failure
nobody planned for, in any entry point (the environment check, the
Typer-free paths, Typer), is one line on stderr, exit 1 and never a
traceback; with `--json` it is also a JSON error object on stdout. The
traceback is shown only with LOOPCTL_DEBUG=1 (there is no log file of it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import in_process
from loopctl.cli.failure import report, say, wants_json
from loopctl.domain.errors import EXIT_FAILED, EXIT_INTERRUPTED, NoSuchLoop

HINT = "(set LOOPCTL_DEBUG=1 for a traceback)"
BOOM = "unexpected error: RuntimeError: boom " + HINT


@pytest.fixture
def broken_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command's first step, opening the store, fails as a bug would."""
    from loopctl.storage import store

    def boom(*_: object, **__: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(store.Store, "__init__", boom)


# (args, path): the Typer-free list, the Typer-free JSON view, a Typer command.
COMMANDS = [(["ls"], "direct"), (["ls", "--json"], "direct json"),
            (["status", "--json"], "direct json"), (["history", "job"], "typer"),
            (["history", "job", "--json"], "typer")]


@pytest.mark.parametrize(("args", "path"), COMMANDS, ids=lambda v: " ".join(v)
                         if isinstance(v, list) else v)
@pytest.mark.usefixtures("broken_store")
def test_an_unexpected_error_is_one_line_and_exit_1(args: list[str], path: str) -> None:
    proc = in_process(*args)
    assert proc.returncode == EXIT_FAILED, (path, proc.stderr)
    assert proc.stderr == f"loopctl: {BOOM}\n"
    assert "Traceback" not in proc.stderr
    if "--json" in args:
        assert json.loads(proc.stdout) == {
            "version": 1, "error": {"code": EXIT_FAILED, "message": BOOM}}
    else:
        assert proc.stdout == ""


def test_the_environment_check_shares_the_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from loopctl import settings

    def boom() -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(settings, "check_env", boom)
    proc = in_process("ls", "--json")
    assert (proc.returncode, proc.stderr) == (EXIT_FAILED, f"loopctl: {BOOM}\n")
    assert json.loads(proc.stdout)["error"] == {"code": EXIT_FAILED, "message": BOOM}


def test_as_a_process_no_traceback_reaches_the_user(tmp_path: object) -> None:
    """The console script as the user runs it, a bug planted before it starts."""
    code = ("import sys\nimport loopctl.storage.store as s\n"
            "def boom(*a, **k):\n    raise RuntimeError('boom')\n"
            "s.Store.__init__ = boom\nfrom loopctl.entry import main\n"
            "sys.argv = ['loopctl', *sys.argv[1:]]\nmain()\n")
    env = {k: v for k, v in os.environ.items() if k != "LOOPCTL_DEBUG"}
    proc = subprocess.run([sys.executable, "-c", code, "history", "job", "--json"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert (proc.returncode, proc.stderr) == (EXIT_FAILED, f"loopctl: {BOOM}\n")
    assert json.loads(proc.stdout)["error"]["message"] == BOOM
    debug = subprocess.run([sys.executable, "-c", code, "history", "job"],
                           capture_output=True, text=True, timeout=60,
                           env=dict(env, LOOPCTL_DEBUG="1"))
    assert debug.returncode == 1 and "Traceback" in debug.stderr
    assert "RuntimeError: boom" in debug.stderr and HINT not in debug.stderr


# -- report, say and wants_json themselves ------------------------------------


def test_report_gives_each_kind_of_failure_its_code(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOOPCTL_DEBUG", raising=False)
    missing = NoSuchLoop("job")
    assert report(missing, as_json=True) == 4
    out, err = capsys.readouterr()
    assert err == f"loopctl: error: {missing.message}\n" and "no such loop" in err
    assert json.loads(out) == {"version": 1, "error": {"code": 4, "message": missing.message}}
    assert report(KeyboardInterrupt()) == EXIT_INTERRUPTED
    assert capsys.readouterr() == ("", "loopctl: interrupted\n")
    assert report(BrokenPipeError(), as_json=True) == 0  # `loopctl ls | head`
    assert capsys.readouterr() == ("", "")
    assert report(ValueError("x" * 1000)) == EXIT_FAILED
    out, err = capsys.readouterr()
    assert out == "" and err == f"loopctl: unexpected error: ValueError: {'x' * 300} {HINT}\n"


def test_with_loopctl_debug_the_error_is_raised(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LOOPCTL_DEBUG", "1")
    with pytest.raises(RuntimeError, match="boom"):
        report(RuntimeError("boom"))
    assert capsys.readouterr() == ("", "")
    assert report(NoSuchLoop("job")) == 4  # a planned failure stays one line


def test_say_success_has_no_label_and_no_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert say("nothing to do", 0, as_json=True) == 0
    assert capsys.readouterr() == ("", "loopctl: nothing to do\n")
    assert say("busy", 75, "note: ") == 75
    assert capsys.readouterr() == ("", "loopctl: note: busy\n")


@pytest.mark.parametrize(("args", "wanted"), [
    (["ls", "--json"], True), (["ls"], False), (["start", "job", "--", "--json"], False),
    (["start", "job", "--json", "--", "x"], True), ([], False), (["--"], False),
])
def test_wants_json_reads_the_flag_before_a_separator(args: list[str], wanted: bool) -> None:
    assert wants_json(args) is wanted
