"""How a command's process ends (loopctl.entry `_leave`): the `loopctl`
script skips the interpreter's teardown, and still runs the atexit handlers,
flushes its output and exits with the command's code; anything that would
lose by it (another thread, a caller going on) gets the usual exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# A file left open and unflushed in a module global shows whether the
# teardown ran (it closes the file); an atexit handler must run either way.
PRELUDE = """\
import atexit, os, sys
torn = open(os.environ["TORN"], "w")
torn.write("torn down")
atexit.register(lambda: sys.stderr.write("atexit ran\\n"))
from loopctl.entry import main
sys.argv = ["loopctl", *sys.argv[1:]]
"""


def end_of(home: Path, body: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The process's end, and `torn down` on stderr when the teardown ran."""
    torn = home.parent / "torn"
    proc = subprocess.run([sys.executable, "-c", PRELUDE + body, *args],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "LOOPCTL_HOME": str(home), "NO_COLOR": "1",
                               "TORN": str(torn)})
    proc.stderr += torn.read_text()
    return proc


def test_the_script_ends_without_the_teardown_and_keeps_what_it_owes(home: Path) -> None:
    # `tick --json` takes the route without Typer (cli/direct.py), which ends by `_leave`.
    proc = end_of(home, "sys.stdout.write('unflushed ')\nmain(program=True)\n", "tick", "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith('unflushed {\n  "version": 1')  # written, in order
    assert "atexit ran" in proc.stderr
    assert "torn down" not in proc.stderr


@pytest.mark.parametrize("program", [True, False])
def test_the_exit_code_is_the_commands_either_way(home: Path, program: bool) -> None:
    proc = end_of(home, f"main(program={program})\n", "run", "nope")
    assert proc.returncode == 4 and "no such loop" in proc.stderr
    assert ("torn down" in proc.stderr) is not program


def test_a_caller_that_goes_on_gets_system_exit(home: Path) -> None:
    proc = end_of(home, "try:\n    main()\nexcept SystemExit as e:\n"
                        "    print('went on', e.code)\n", "ls")
    assert proc.returncode == 0 and "went on 0" in proc.stdout
    assert "torn down" in proc.stderr


def test_another_thread_still_running_is_waited_for(home: Path) -> None:
    body = ("import threading, time\n"
            "threading.Thread(target=lambda: (time.sleep(0.3), print('thread done'))).start()\n"
            "main(program=True)\n")
    proc = end_of(home, body, "ls")
    assert proc.returncode == 0 and "thread done" in proc.stdout
