"""Acting on another machine's run (DESIGN §21 "Runs of other machines"):
`stop --kill` of a run m1 is running, asked on m2, is a request on the
run's claim; m1's fence sees it at its next renewal and stops the run as a
local `stop --kill` does. m1's processes live in a pid namespace of their
own; the run's refs in the store are pointed at a process of m2's (a pid
collision), which must not be signalled."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import psycopg
import pytest

from conftest import wait_for
from loopctl.storage.proc_identity import ref
from store.machines import Machine, machines

pytestmark = pytest.mark.real_processes

LONG = """\
version: 1
store: {dsn}
loops:
  long:
    prompt: echo start >> {marks}; for i in $(seq 600); do echo beat >> {marks}; sleep 0.1; done
    agent: shell
    every: 1h
    cwd: {cwd}
    timeout: 30m
"""
RENEW = 1


def collide(dsn: str, pid_ref: dict[str, object]) -> None:
    """The run's supervisor and agent refs name a process of this machine."""
    def launched() -> object:
        with psycopg.connect(dsn) as conn:
            [entry] = [r[0] for r in conn.execute("SELECT entry FROM loopctl.loop_state")]
        # The agent can print before its supervisor records its pid (a busy machine).
        return entry if all((entry.get("run") or {}).get(k) for k in ("supervisor", "agent")) \
            else None

    entry = wait_for(launched, timeout=30)
    with psycopg.connect(dsn) as conn:
        for key in ("supervisor", "agent"):
            entry["run"][key].update(pid_ref)
        conn.execute("UPDATE loopctl.loop_state SET entry = %s::jsonb", (json.dumps(entry),))


def test_stop_kill_on_another_machine_asks_the_owner_through_the_store(
        tmp_path: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPCTL_STORE_RENEW", str(RENEW))
    monkeypatch.setenv("LOOPCTL_STORE_STALE", "30")  # far: the kill is not the fence's
    marks = tmp_path / "marks"
    m1, m2 = machines(tmp_path / "machines", 2, own_pids=True)
    m2.own_pids = False  # the pids its stop could signal are the test's
    for m in (m1, m2):
        m.define(LONG.format(dsn=pg_dsn, marks=marks, cwd=tmp_path))
    assert m1.run("store", "init").returncode == 0
    first = m1.popen("run", "long")
    bystander = subprocess.Popen(["sleep", "600"])
    try:
        wait_for(lambda: marks.exists() and "beat" in marks.read_text(), timeout=30)
        collide(pg_dsn, ref(bystander.pid))
        asked_at = time.monotonic()
        stop = m2.run("stop", "--kill", "long")
        assert stop.returncode == 0, stop.stderr
        assert "asked machine m1 to kill run" in stop.stdout, stop.stdout
        assert f"it acts within {RENEW}s" in stop.stdout, stop.stdout
        first.wait(timeout=30)
        took = time.monotonic() - asked_at
        assert bystander.poll() is None  # nothing on m2 was signalled
    finally:
        bystander.kill()
        if first.poll() is None:
            first.kill()
    # Within a renewal (and the kill's grace), not a stale window.
    assert took < RENEW + 5, took
    [record] = (m1.home / "loopctl" / "state" / "runs" / "long").glob("*.json")
    ran = json.loads(record.read_text())
    assert ran["outcome"] == "killed", ran
    assert "stop --kill` on machine m2" in ran["note"], ran
    with psycopg.connect(pg_dsn) as conn:
        by = conn.execute("SELECT kill_requested_by FROM loopctl.slot_claims").fetchone()
        [entry] = [r[0] for r in conn.execute("SELECT entry FROM loopctl.loop_state")]
    assert by == ("m2",)
    assert entry["status"] == "stopped" and not entry.get("run"), entry


def capacity(machine: Machine) -> str:
    done = machine.run("doctor", "--json")
    found = json.loads(done.stdout)["findings"]
    return next(f["message"] for f in found if f["check"] == "capacity")


def test_doctor_counts_another_machine_s_run_by_its_claim(
        tmp_path: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """m1's run is in flight on m2's count while its claim is renewed (its
    pids mean nothing on m2), and not once the claim is recorded lost."""
    monkeypatch.setenv("LOOPCTL_STORE_RENEW", str(RENEW))
    marks = tmp_path / "marks"
    m1, m2 = machines(tmp_path / "machines", 2, own_pids=True)
    for m in (m1, m2):
        m.define(LONG.format(dsn=pg_dsn, marks=marks, cwd=tmp_path))
    assert m1.run("store", "init").returncode == 0
    first = m1.popen("run", "long")
    try:
        wait_for(lambda: marks.exists() and "beat" in marks.read_text(), timeout=30)
        assert "1 run(s) in flight" in capacity(m2)
        with psycopg.connect(pg_dsn) as conn:
            conn.execute("UPDATE loopctl.slot_claims SET lost_at = now()")
        wait_for(lambda: first.poll() is not None, timeout=30)  # its fence stopped it
    finally:
        if first.poll() is None:
            first.kill()
    assert "0 run(s) in flight" in capacity(m2)
