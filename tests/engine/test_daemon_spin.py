"""The daemon's anti-spin guard (loopctl/engine/daemon.py: "Still due after a pass:
never spin").

A loop can stay due after a driver pass that cannot fire it: here a
rate-limited loop whose state entry was damaged. The repair pauses it
(`error`) and keeps its passed `resume_at`, which nothing clears until the
user resumes it, so every pass ends with a wake time in the past. Without
the guard the daemon would pass again at once, back to back. With it, it
looks again a second later and stays nearly idle. Measured as the daemon's
CPU time over wall time (a ratio, so a slow machine does not make it
flaky), and by its read calls (every pass reads loops.yaml and state.json),
which a starved machine cannot hide; tests/faults/test_daemon_idle.py counts
reads for other cases.
"""

from __future__ import annotations

import json
import os
import time

import psutil
import pytest
from faults.support import lease, stop

from conftest import CLI, agent_command, wait_for
from loopctl.engine.firing import driver_pass
from loopctl.storage.locks import hold
from loopctl.storage.store import Store

WINDOW = 3.0  # seconds of measurement: three of the guard's one-second looks
MAX_SHARE = 0.3  # of one core; measured: guarded < 1%, spinning 50-90% (all it gets)
MAX_READS = 300  # measured: guarded ~15-40 in the window, spinning ~18000


def damage_a_rate_limited_entry(cli: CLI, name: str) -> None:
    """Rate-limited until a minute ago, with one field damaged."""
    state_file = cli.state_dir / "state.json"
    with hold(cli.state_dir / "store.lock", timeout=30):
        state = json.loads(state_file.read_text())
        st = state["loops"][name]
        st.update(status="paused", reason="rate_limited", resume_at=time.time() - 60,
                  failures="many")
        fresh = state_file.with_suffix(".test-tmp")
        fresh.write_text(json.dumps(state))
        os.replace(fresh, state_file)


def cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def test_a_loop_still_due_after_a_pass_does_not_make_the_daemon_spin(cli: CLI) -> None:
    cli("start", "p", "--name", "stuck", "--every", "1h", "--after", "1h",
        "--command", agent_command(), check=0)
    cli("tick", check=0)
    damage_a_rate_limited_entry(cli, "stuck")
    # The control: after a pass (which repairs the entry) and after the next
    # one, the loop is still due and nothing fired: the guard's case.
    for _ in range(2):
        report = driver_pass(Store(), time.time())
        assert report.fired == [] and report.wake_at is not None
        assert report.wake_at <= time.time()
    st = cli.state()["loops"]["stuck"]
    assert (st["status"], st["reason"]) == ("paused", "error"), st

    daemon = cli.popen("daemon", "--quiet")
    try:
        # Its start-up (imports) is over once it holds the lease.
        wait_for(lambda: (lease(cli) or {}).get("pid") == daemon.pid)
        proc = psutil.Process(daemon.pid)
        cpu, wall, reads = cpu_seconds(proc), time.monotonic(), proc.io_counters().read_count
        time.sleep(WINDOW)  # the measurement window, not a wait for an event
        share = (cpu_seconds(proc) - cpu) / (time.monotonic() - wall)
        reads = proc.io_counters().read_count - reads
        assert daemon.poll() is None, "the daemon exited"
    finally:
        stop(daemon)
    assert share < MAX_SHARE, f"the daemon used {share:.0%} of a core: it spins"
    assert reads < MAX_READS, f"{reads} reads in {WINDOW:g}s: the daemon passes back to back"
    assert cli.records("stuck") == []


def test_an_edit_saved_during_a_pass_still_looks_new_to_the_daemon(
        cli: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon reads loops.yaml again only when its signature differs from
    the one its last pass reported; a pass that reported the file as it is
    after an edit saved mid-pass would leave that edit unread for good."""
    import loopctl.engine.firing as firing
    from loopctl.storage.paths import file_signature

    cli("start", "p", "--name", "steady", "--every", "1h", "--command", "true", check=0)
    loops = cli.home / "loops.yaml"
    read_as = file_signature(loops)
    real_plan = firing.lifecycle.plan

    def plan_while_the_user_saves(*args: object, **kwargs: object) -> object:
        loops.write_bytes(loops.read_bytes() + b"# saved mid-pass, a longer file\n")
        return real_plan(*args, **kwargs)

    monkeypatch.setattr(firing.lifecycle, "plan", plan_while_the_user_saves)
    report = driver_pass(Store(), time.time())
    assert report.signatures is not None
    assert report.signatures[0] == read_as != file_signature(loops)
