"""Store and lease locks held by another process (loopctl/storage/locks.py).

A command that cannot take `store.lock` gives up after the store's lock
timeout with one line and exit 75 (busy) instead of hanging forever; a tick
that cannot take `lease.lock` defers (exit 0). The timeouts are module
constants (60 s and 10 s), so the library is tested in-process with a short
timeout, and real commands run in a process whose lock waits are shortened.
The lock is always held by a real process: flock is per open file, and a
holder in this process would not block it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from faults.support import one_clear_line

from conftest import CLI, agent_command
from loopctl.domain.errors import EXIT_BUSY, BusyError
from loopctl.storage.store import Store

SHORT = 0.3
Holder = Callable[[str], "subprocess.Popen[str]"]

HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()  # until the test closes our stdin (or kills us)
"""

# Runs loopctl's real entry point with every lock wait cut to 0.5 s.
SHORT_WAITS = """
import sys
from loopctl.storage import locks
real_hold = locks.hold
locks.hold = lambda path, timeout: real_hold(path, min(timeout, 0.5))
sys.argv = ["loopctl", *sys.argv[1:]]
from loopctl.entry import main
main()
"""


@pytest.fixture
def holder(cli: CLI) -> Iterator[Holder]:
    """`holder(name)`: a real process holding `<state>/name` until the test ends."""
    procs: list[subprocess.Popen[str]] = []

    def hold(name: str) -> subprocess.Popen[str]:
        cli.state_dir.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(cli.state_dir / name)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        return proc

    yield hold
    for proc in procs:
        proc.kill()
        proc.wait()


def try_lock(store: Store, timeout: float) -> BaseException | None:
    """Take and release the store lock in a thread; the error it raised, or
    None. A lock that ignored its timeout fails the test instead of hanging it."""
    outcome: list[BaseException | None] = []

    def attempt() -> None:
        try:
            with store.lock(timeout=timeout):
                outcome.append(None)
        except BaseException as exc:  # handed to the test
            outcome.append(exc)

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(timeout + 15)
    assert outcome, f"the store lock did not give up after its {timeout}s timeout"
    return outcome[0]


def short_waits(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", SHORT_WAITS, *args], capture_output=True,
                          text=True, timeout=60)


def test_the_store_lock_gives_up_with_busy_and_works_once_released(
        cli: CLI, holder: Holder) -> None:
    store = Store()
    proc = holder("store.lock")
    began = time.monotonic()
    error = try_lock(store, SHORT)
    assert time.monotonic() - began >= SHORT  # it did wait for the holder first
    assert isinstance(error, BusyError), error
    assert error.code == EXIT_BUSY == 75
    assert "\n" not in error.message and "store.lock" in error.message
    assert "held by another loopctl" in error.message
    # A holder that dies (even by SIGKILL) releases the lock at once.
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert try_lock(store, 5) is None


@pytest.mark.parametrize("args", [
    ("pause", "held"), ("start", "p", "--name", "other", "--every", "1h"), ("run", "held"),
    ("tick",)], ids=["pause", "start", "run", "tick"])
def test_a_command_fails_with_one_line_and_exit_75_while_the_store_lock_is_held(
        cli: CLI, holder: Holder, args: tuple[str, ...]) -> None:
    cli("start", "p", "--name", "held", "--every", "1h",
        "--command", agent_command(), check=0)
    files = [cli.home / "loops.yaml", cli.state_dir / "state.json"]
    before = [path.read_bytes() if path.exists() else None for path in files]
    holder("store.lock")
    proc = short_waits(*args)
    assert proc.returncode == EXIT_BUSY, (proc.returncode, proc.stdout, proc.stderr)
    line = one_clear_line(proc.stderr)
    assert line.startswith("loopctl: error: ") and "store.lock" in line, line
    assert [path.read_bytes() if path.exists() else None for path in files] == before
    assert cli.records("held") == []


def test_tick_defers_while_the_lease_lock_is_held(cli: CLI, holder: Holder) -> None:
    """Another driver mid-acquire will fire what is due: tick says so, exit 0."""
    cli("start", "p", "--name", "due", "--every", "1h",
        "--command", agent_command(), check=0)
    holder("lease.lock")
    proc = short_waits("tick")
    assert proc.returncode == 0, proc.stderr
    assert "taking the lease right now" in one_clear_line(proc.stderr)
    assert cli.records("due") == [] and not (cli.state_dir / "lease.json").exists()
