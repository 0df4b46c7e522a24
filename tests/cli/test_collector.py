"""The cyclic collector is off for a command (loopctl.entry) and on wherever
a process lives long: the daemon, and the tests' in-process harness."""

from __future__ import annotations

import contextlib
import gc
import io
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import in_process


@pytest.fixture
def collector_on() -> Iterator[None]:
    assert gc.isenabled()
    yield
    gc.enable()  # whatever the test did, the worker goes on with it


def test_a_command_leaves_the_collector_off(home: Path, collector_on: None,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Turned back on at the end, the collector would start at once on
    everything start-up allocated: the cost it was turned off to save."""
    from loopctl.entry import main

    monkeypatch.setattr(sys, "argv", ["loopctl", "ls", "--json"])
    with pytest.raises(SystemExit) as ended, contextlib.redirect_stdout(io.StringIO()):
        main()
    assert not ended.value.code
    assert not gc.isenabled()


def test_the_in_process_harness_turns_it_back_on(home: Path, collector_on: None) -> None:
    assert in_process("ls").returncode == 0
    assert gc.isenabled()


def test_the_daemon_runs_with_the_collector_on(home: Path, collector_on: None) -> None:
    from loopctl.engine.daemon import Daemon
    from loopctl.storage.store import Store

    daemon = Daemon(Store(), quiet=True)
    daemon.stopping = True  # set up, then stop before the first pass
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT,
                                                        signal.SIGCHLD)}
    wakeup = signal.set_wakeup_fd(-1)  # the daemon sets its own: put this one back after
    gc.disable()  # as loopctl.entry leaves it
    try:
        assert daemon.run() == 0
        assert gc.isenabled()
        assert gc.get_freeze_count() > 0  # start-up's objects, not walked again
    finally:
        gc.unfreeze()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        os.close(signal.set_wakeup_fd(wakeup))
        os.close(daemon.wake_r)


def test_a_command_freezes_its_objects_when_the_interpreter_exits(home: Path) -> None:
    """The interpreter's last collection walks whatever is not frozen (a
    tenth of a run's instructions): a command freezes everything at exit, and
    only then, since a test calling `main` in-process lives on."""
    import subprocess

    code = ("import atexit, gc, sys\n"
            "atexit.register(lambda: print('frozen', gc.get_freeze_count(), file=sys.stderr))\n"
            "from loopctl.entry import main\nsys.argv = ['loopctl', 'ls']\n"
            "print('before', gc.get_freeze_count(), file=sys.stderr)\nmain()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "LOOPCTL_HOME": str(home)}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    said = dict(line.split() for line in proc.stderr.splitlines() if line[:1] in "bf")
    assert said["before"] == "0" and int(said["frozen"]) > 1000


def test_long_lived_freezes_start_up_and_turns_it_on(collector_on: None) -> None:
    from loopctl.collector import long_lived

    gc.disable()  # as loopctl.entry leaves it
    try:
        long_lived()
        assert gc.isenabled() and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_the_collector_is_set_in_one_place() -> None:
    """Every long-running process goes through `long_lived` (the daemon and
    `daemon --serve`, `serve`, each warm supervisor, `watch`), and nothing
    else turns the collector on or off but the reading commands' scoped
    pause (commands/common.py, which puts it back as it found it)."""
    import loopctl

    package = Path(loopctl.__file__).parent
    callers = {str(p.relative_to(package)) for p in package.rglob("*.py")
               if "long_lived()" in p.read_text()}
    assert callers >= {"engine/daemon.py", "serve/main.py", "engine/warm.py", "cli/watch.py"}
    setters = {str(p.relative_to(package)) for p in package.rglob("*.py")
               if any(f"gc.{call}(" in p.read_text() for call in ("enable", "disable", "freeze"))}
    assert setters == {"collector.py", "commands/common.py"}, setters
