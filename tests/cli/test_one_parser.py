"""One parser per command (issue 52, item 4): whatever route serves an argv
(the idle-tick exit, the route without Typer in cli/direct.py, the Typer app
narrowed to one command), it exits, prints and fails as the whole Typer app
does: `--help`, an unknown option, a missing argument, a bad value, and the
plain forms the fast route takes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import CLI, loopctl_argv

# The whole Typer app, with run_app's one-line errors and exit codes, and
# neither the fast route nor the one-command copy of the app.
WHOLE_APP = ("import sys\nfrom loopctl.cli import app\napp._narrowed = lambda args: app.app\n"
             "app.run_app(sys.argv[1:])")
# WHOLE_APP for many argvs: one process imports the app (~0.2 s of CPU, 56
# times over) and forks a child per argv from the state a fresh `python -c
# WHOLE_APP` has at its last line; the child takes the case's cwd and
# environment, writes to the case's files and exits as the interpreter
# would. A difference from a fresh process shows as a mismatch with the
# real `loopctl` process, never as a pass.
WHOLE_APP_SERVER = WHOLE_APP.rsplit("\n", 1)[0] + """
import json, os
def serve(job):
    os.chdir(job["cwd"])
    os.environ.clear()
    os.environ.update(job["env"])
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    for fd, path in ((1, job["out"]), (2, job["err"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
    sys.argv = ["-c", *job["args"]]
    try:
        app.run_app(job["args"])
    except SystemExit as exc:
        code = exc.code
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code & 0xFF)
for line in sys.stdin:
    pid = os.fork()
    if pid == 0:
        try:
            serve(json.loads(line))
        finally:
            os._exit(120)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


class WholeApp:
    """The WHOLE_APP_SERVER process of this worker and module."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.proc = subprocess.Popen([sys.executable, "-c", WHOLE_APP_SERVER], text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.count = 0

    def __call__(self, args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.count += 1
        out, err = self.folder / f"{self.count}.out", self.folder / f"{self.count}.err"
        self.proc.stdin.write(json.dumps({"args": args, "env": env, "cwd": os.getcwd(),
                                          "out": str(out), "err": str(err)}) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        assert answer, "the whole-app server died"
        return int(answer), out.read_text(), err.read_text()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def whole_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WholeApp]:
    server = WholeApp(tmp_path_factory.mktemp("whole-app"))
    try:
        yield server
    finally:
        server.close()

# Every command that has, or had, a route besides the Typer app, with the
# argv to hold equal: the plain forms first, then help and the errors.
CASES: dict[str, list[list[str]]] = {
    "tick": [["tick"], ["tick", "-q"], ["tick", "--quiet", "-q"], ["tick", "--json"],
             ["tick", "--wait", "--json", "-q"], ["tick", "--help"], ["tick", "-h"],
             ["tick", "--nope"], ["tick", "--wait", "--json", "--bogus"], ["tick", "-q", "x"],
             ["tick", "--json=1"], ["tick", "--", "--wait"]],
    "run": [["run", "held"], ["run", "nope"], ["run", "nope", "--force"],
            ["run", "nope", "--scheduled"], ["run", "--help"], ["run"], ["run", "--force"],
            ["run", "--nope"], ["run", "held", "--nope"], ["run", "held", "x"],
            ["run", "held", "--scheduled", "--force"], ["run", "held", "--slot", "x"],
            ["run", "held", "--force=1"], ["run", "-h", "held"]],
    "ls": [["ls"], ["list"], ["ls", "--json"], ["list", "--json"], ["ls", "--help"],
           ["list", "--help"], ["ls", "--nope"], ["ls", "--json", "--bogus"], ["ls", "x"],
           ["ls", "--status", "bad"], ["ls", "--sort"], ["ls", "--json", "--json"]],
    "status": [["status", "--json"], ["status", "held", "--json"], ["status", "--json", "held"],
               ["status", "--help"], ["status", "--json", "nope"], ["status", "nope", "--json"],
               ["status", "--json", "--nope"], ["status", "a", "b", "--json"],
               ["status", "--json", "--json"], ["status", "", "--json"]],
    "decide": [["decide", "--help"], ["decide"], ["decide", "--nope"],
               ["decide", "maybe", "--summary", "s"], ["decide", "continue", "--next", "soon"],
               ["decide", "complete", "--summary"], ["decide", "complete", "--summary", "s"],
               ["decide", "fail", "--summary=s", "--evidence", "e"]],
}
ALL = [(command, args) for command, cases in CASES.items() for args in cases]


def held_home(cli: CLI) -> None:
    """One paused loop, `held` (nothing due, no clock-moving NEXT), one
    reconciled state: what every case reads. (The cases themselves always
    run as processes, below.)"""
    cli("start", "p", "--name", "held", "--every", "1h", "--command", "true", check=0)
    cli("pause", "held", check=0)
    cli("tick", check=0)


def route(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """Exit code, stdout and stderr; in a JSON view, the one number that
    moves with the clock between two calls is left out."""
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    out = re.sub(r'"deadline_remaining_s": -?\d+', '"deadline_remaining_s": N', proc.stdout)
    return proc.returncode, out, proc.stderr


@pytest.mark.parametrize(("command", "args"), ALL, ids=[" ".join(a) for _, a in ALL])
def test_every_route_parses_as_the_typer_app(cli: CLI, whole_app: WholeApp, command: str,
                                            args: list[str]) -> None:
    held_home(cli)
    # Outside a run: `decide` fails the same way on both routes.
    env = {k: v for k, v in os.environ.items() if k != "LOOPCTL_DECISION_FILE"}
    served = route(loopctl_argv(*args), env)        # the real `loopctl` process
    code, out, err = whole_app(args, env)
    whole = code, re.sub(r'"deadline_remaining_s": -?\d+', '"deadline_remaining_s": N', out), err
    assert served == whole, args
    assert "Traceback" not in served[2]


PLAIN = [["tick"], ["tick", "-q"], ["tick", "--wait", "--json"], ["run", "held"],
         ["run", "nope", "--force"], ["ls"], ["list", "--json"], ["status", "--json"],
         ["status", "held", "--json"], ["status", "nope", "--json"]]
HARNESS = ("import sys\nfrom loopctl.entry import main\nsys.argv = ['loopctl', *sys.argv[1:]]\n"
           "try:\n    main()\nexcept SystemExit:\n    pass\n"
           "print('TYPER' if 'typer' in sys.modules else 'NO-TYPER', file=sys.stderr)")


@pytest.mark.parametrize("args", PLAIN, ids=" ".join)
def test_the_plain_forms_take_the_route_without_typer(cli: CLI, args: list[str]) -> None:
    """Else the test above compares the Typer app with itself."""
    held_home(cli)
    proc = subprocess.run([sys.executable, "-c", HARNESS, *args], capture_output=True,
                          text=True, timeout=120)
    assert proc.stderr.splitlines()[-1] == "NO-TYPER", proc.stderr


@pytest.mark.parametrize("command", ["tick", "run", "ls", "list", "status"])
def test_the_fast_route_takes_only_options_the_typer_command_declares(command: str) -> None:
    import typer

    from loopctl.cli import app, flags

    table = {"tick": flags.TICK_OPTIONS, "run": flags.RUN_OPTIONS, "ls": flags.VIEW_OPTIONS,
             "list": flags.VIEW_OPTIONS, "status": flags.VIEW_OPTIONS}[command]
    group = typer.main.get_command(app.app)
    declared = {opt: param.name for param in group.commands[command].params  # type: ignore[attr-defined]
                for opt in param.opts + param.secondary_opts}
    for name, spellings in table.items():
        for flag in spellings:
            assert declared.get(flag) == name, (command, flag)
    assert set(flags.TICK_OPTIONS["quiet"]) >= flags.FAST_TICK_FLAGS


def test_the_plain_reader_refuses_what_it_cannot_hold_equal() -> None:
    from loopctl.cli.flags import RUN_OPTIONS, TICK_OPTIONS, plain

    assert plain(["--wait", "-q", "--wait"], TICK_OPTIONS) == ([], {"wait", "quiet"})
    assert plain(["x", "--force"], RUN_OPTIONS, 1) == (["x"], {"force"})
    for args in (["--wait=1"], ["-qq"], ["--"], ["--help"], ["x"]):
        assert plain(args, TICK_OPTIONS) is None, args
    for args in ([], ["--force"], ["-x"], ["x", "y"], ["x", "--slot", "t"]):
        assert plain(args, RUN_OPTIONS, 1) is None, args


def test_no_route_is_left_that_the_tables_do_not_declare(tmp_path: Path) -> None:
    """`dispatch` declines every form `plain` does not read."""
    from loopctl.cli.direct import dispatch

    for args in (["decide", "complete"], ["status"], ["status", "x"], ["status", "--json", "x"],
                 ["status", "", "--json"], ["ls", "--sort", "name"], ["ls", "-h"],
                 ["tick", "--help"], ["run", "x", "--scheduled", "--force"], ["run", "-h"]):
        assert dispatch(args) is None, args
