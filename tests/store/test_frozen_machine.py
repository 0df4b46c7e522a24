"""A machine frozen past the stale window (DESIGN §21 "Liveness and
fencing"): every process of m1 (its own pid namespace) is stopped with
SIGSTOP mid-run and continued after another machine has moved on. Its run
is recorded lost once, by m2, with the machine that ran it; its slot does
not run again; m1's fence kills its agent when it wakes and its supervisor
does not settle the run a second time. The agents write their marks to one
file, in order: the file is the timeline."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import psutil
import psycopg
import pytest

from conftest import wait_for
from store.machines import hourly, machines
from store.test_slot_claims import past_hour

pytestmark = pytest.mark.real_processes

RENEW, STALE = 0.5, 3
# 40 beats of 0.1 s: it outlives the freeze only if the fence fails to kill it.
BODY = ("echo start $LOOPCTL_RUN_ID >> {marks}; for i in $(seq 40); do "
        "echo beat $LOOPCTL_RUN_ID >> {marks}; sleep 0.1; done; "
        "echo end $LOOPCTL_RUN_ID >> {marks}")


def marks(path: Path) -> list[tuple[str, str]]:
    text = path.read_text().splitlines() if path.exists() else []
    return [(line.split()[0], line.split()[1]) for line in text]


def stale(dsn: str, run_id: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT clock_timestamp() - renewed_at > make_interval(secs => %s) "
                           "FROM loopctl.slot_claims WHERE run_id = %s",
                           (STALE, run_id)).fetchone()
    return bool(row and row[0])


def signal_all(root: psutil.Process, sig: int) -> None:
    """`sig` to every process of the machine (its pid namespace's tree)."""
    for proc in [root, *root.children(recursive=True)]:
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass


@pytest.mark.slow
def test_a_frozen_machine_s_run_is_lost_once_and_its_agent_killed(
        tmp_path: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPCTL_STORE_RENEW", str(RENEW))
    monkeypatch.setenv("LOOPCTL_STORE_STALE", str(STALE))
    path = tmp_path / "marks"
    m1, m2 = machines(tmp_path / "machines", 2, own_pids=True)
    for m in (m1, m2):
        m.define(hourly(pg_dsn, tmp_path, BODY.format(marks=path)))
    assert m1.run("store", "init").returncode == 0
    slot, later = past_hour(3), past_hour(2)
    first = m1.popen("run", "hourly", "--scheduled", "--slot", slot)
    root = psutil.Process(first.pid)
    try:
        def beating() -> bool:
            if first.poll() is not None:
                pytest.fail(first.communicate()[1])
            return any(kind == "beat" for kind, _ in marks(path))

        wait_for(beating, timeout=30)
        run1 = marks(path)[0][1]
        # Alive by its claim: m2 (pids of its own) does not call it lost.
        busy = m2.run("run", "hourly", "--scheduled", "--slot", later)
        assert busy.returncode == 75 and f"in flight ({run1})" in busy.stderr, busy.stderr
        signal_all(root, signal.SIGSTOP)
        wait_for(lambda: stale(pg_dsn, run1), timeout=30)
        # The slot it served is taken for good: m2 records the run lost and
        # does not run the slot again.
        again = m2.run("run", "hourly", "--scheduled", "--slot", slot)
        assert again.returncode == 0 and "already ran" in again.stderr, again.stderr
        second = m2.popen("run", "hourly", "--scheduled", "--slot", later)
        wait_for(lambda: [r for kind, r in marks(path) if kind == "start" and r != run1],
                 timeout=30)
        signal_all(root, signal.SIGCONT)
        assert first.wait(timeout=60) is not None
        assert second.wait(timeout=60) == 0, second.stderr
    finally:
        if first.poll() is None:
            signal_all(root, signal.SIGCONT)
            first.kill()
    timeline = marks(path)
    run2 = next(r for kind, r in timeline if kind == "start" and r != run1)
    assert ("end", run1) not in timeline, timeline  # killed, not finished
    assert ("end", run2) in timeline
    # After m2's body started, m1's agent wrote at most what it could in the
    # instant between waking and its fence's kill.
    after = timeline[timeline.index(("start", run2)):]
    late = [mark for mark in after if mark[1] == run1]
    assert len(late) <= 2, timeline
    # Lost once, recorded where it was noticed, naming the machine that ran it.
    lost = json.loads((m2.home / "loopctl" / "state" / "runs" / "hourly" /
                       f"{run1}.json").read_text())
    assert lost["outcome"] == "lost" and lost["machine"] == "m1", lost
    with psycopg.connect(pg_dsn) as conn:
        [entry] = [r[0] for r in conn.execute("SELECT entry FROM loopctl.loop_state")]
        claims = conn.execute("SELECT slot, machine, lost_at IS NOT NULL FROM "
                              "loopctl.slot_claims ORDER BY slot").fetchall()
    assert entry["outcomes"].count("lost") == 1 and entry["iterations"] == 2, entry
    assert entry["last_run_id"] == run2 and not entry.get("run"), entry
    assert claims == [(f"schedule:{slot}", "m1", True), (f"schedule:{later}", "m2", False)]
    # m1's supervisor, woken, kept what happened in its own record only.
    kept = json.loads((m1.home / "loopctl" / "state" / "runs" / "hourly" /
                       f"{run1}.json").read_text())
    assert kept["outcome"] == "killed" and "team store" in kept["note"], kept


@pytest.mark.slow
def test_a_daemon_finds_a_dead_machine_s_run_lost_within_the_stale_window(
        tmp_path: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine that dies sends no word: another machine's daemon, with
    nothing of its own due for an hour, records the run lost once its
    claim is stale (its pids, another namespace's, are never asked)."""
    monkeypatch.setenv("LOOPCTL_STORE_RENEW", str(RENEW))
    monkeypatch.setenv("LOOPCTL_STORE_STALE", str(STALE))
    path = tmp_path / "marks"
    m1, m2 = machines(tmp_path / "machines", 2, own_pids=True)
    m2.own_pids = False  # its daemon: a signal must reach it (m1's pids are its namespace's)
    for m in (m1, m2):
        m.define(hourly(pg_dsn, tmp_path, BODY.format(marks=path)))
    assert m1.run("store", "init").returncode == 0
    log = tmp_path / "daemon.log"
    first = m1.popen("run", "hourly", "--scheduled", "--slot", past_hour(3))
    wait_for(lambda: any(kind == "beat" for kind, _ in marks(path)), timeout=30)
    run1 = marks(path)[0][1]
    with open(log, "w") as out:  # m2's daemon sees m1's run in flight, alive by its claim
        daemon = subprocess.Popen(m2.argv("daemon"), stdout=out, stderr=out, env=m2.env())
    try:
        wait_for(lambda: "lease acquired" in log.read_text(), timeout=30)
        signal_all(psutil.Process(first.pid), signal.SIGKILL)  # the machine dies
        first.wait(timeout=30)
        wait_for(lambda: f"recorded run {run1} as lost" in log.read_text(), timeout=4 * STALE)
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
        if first.poll() is None:
            first.kill()
