"""The cyclic collector is off while a command starts (loopctl.entry) and on
wherever a process lives long: the daemon, and any caller of the entry
point in the same process."""

from __future__ import annotations

import gc
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import in_process


@pytest.fixture
def collector_on() -> Iterator[None]:
    assert gc.isenabled()
    yield
    gc.enable()  # whatever the test did, the worker goes on with it


def test_the_entry_point_turns_the_collector_back_on(home: Path, collector_on: None) -> None:
    assert in_process("ls").returncode == 0
    assert gc.isenabled()
    assert in_process("status", "nope").returncode == 4  # an error path too
    assert gc.isenabled()


def test_the_daemon_runs_with_the_collector_on(home: Path, collector_on: None) -> None:
    from loopctl.engine.daemon import Daemon
    from loopctl.storage.store import Store

    daemon = Daemon(Store(), quiet=True)
    daemon.stopping = True  # set up, then stop before the first pass
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT,
                                                        signal.SIGCHLD)}
    gc.disable()  # as loopctl.entry leaves it
    try:
        assert daemon.run() == 0
        assert gc.isenabled()
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
