"""A daemon with nothing it may fire must sleep, not spin.

Found while building faults 6 and 14: when the only due loop cannot fire (its
lost run's agent still lives, or its entry in loops.yaml is broken), the
daemon runs driver passes back to back at full CPU. CPU time depends on how
loaded the machine is, so these tests count the daemon's read system calls
instead: every pass reads loops.yaml and state.json, a sleeping daemon reads
(almost) nothing. A spinning daemon makes thousands in a few seconds, even on
a starved machine. The lean-idle benchmark itself is in bench/."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from conftest import CLI, wait_for

from .support import asleep_in_select, gone, in_flight, lease, loop_state, start_gated, stop

WINDOW = 2.0
MAX_READS = 100  # a sleeping daemon: a handful (a heartbeat); spinning: thousands



def reads_while_idle(cli: CLI) -> int:
    """Read syscalls of a daemon over WINDOW seconds, once it has settled in."""
    daemon = cli.popen("daemon", "--quiet")
    try:
        wait_for(lambda: (lease(cli) or {}).get("pid") == daemon.pid)
        # Its first pass done: the lease is taken before it, and the daemon
        # waits in select() only after it.
        wait_for(lambda: asleep_in_select(daemon.pid))
        proc = psutil.Process(daemon.pid)
        before = proc.io_counters().read_count
        time.sleep(WINDOW)  # the measurement window itself, not a wait for an event
        return proc.io_counters().read_count - before
    finally:
        stop(daemon)


@pytest.mark.slow
def test_daemon_with_nothing_due_sleeps(cli: CLI) -> None:
    """The control: the measure tells a sleeping daemon."""
    cli("start", "p", "--name", "later", "--every", "1h", "--after", "1h",
        "--command", "true", check=0)
    assert reads_while_idle(cli) < MAX_READS


@pytest.mark.slow
def test_daemon_sleeps_while_an_orphaned_agent_blocks_the_due_loop(
        cli: CLI, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    start_gated(cli, "orphan", gate, every="1s")
    cli("tick", check=0)
    run = wait_for(lambda: in_flight(cli, "orphan"))
    os.kill(run["supervisor"]["pid"], signal.SIGKILL)
    wait_for(lambda: gone(run["supervisor"]["pid"]))
    cli("tick", check=0)  # records it lost
    wait_for(lambda: loop_state(cli, "orphan")["next_due"] < time.time())
    try:
        reads = reads_while_idle(cli)
    finally:
        gate.touch()
    assert reads < MAX_READS, f"{reads} reads in {WINDOW}s: the daemon spins"


@pytest.mark.slow
def test_daemon_sleeps_while_only_a_broken_entry_is_due(cli: CLI) -> None:
    cli("start", "p", "--name", "bad", "--every", "1h", "--after", "1s",
        "--command", "true", check=0)
    loops = cli.home / "loops.yaml"
    loops.write_text(loops.read_text().replace("every: 1h\n", "every: 1 hour\n"))
    wait_for(lambda: loop_state(cli, "bad")["next_due"] < time.time(), timeout=10)
    reads = reads_while_idle(cli)
    assert reads < MAX_READS, f"{reads} reads in {WINDOW}s: the daemon spins"
