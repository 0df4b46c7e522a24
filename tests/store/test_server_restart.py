"""The store's server restarted mid-run (issue 54 "Test what breaks
distributed schedulers"; DESIGN §21 "Liveness and fencing"): a restart
shorter than the stale window costs the run nothing (its supervisor
renews again once the server is back, the run is recorded once, its slot
is not run again, and firing resumes); a server down for longer than the
window has the fence kill the agent, and the run is settled once. The
agents write their marks to one file: the file is the timeline."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from conftest import wait_for
from store.first_run import start_first_run
from store.pg_cluster import Cluster
from store.test_frozen_machine import marks

pytestmark = pytest.mark.real_processes


def store_view(dsn: str) -> tuple[list[tuple], list[tuple], dict]:
    with psycopg.connect(dsn) as conn:
        claims = conn.execute("SELECT slot, run_id, machine, lost_at IS NOT NULL "
                              "FROM loopctl.slot_claims ORDER BY slot").fetchall()
        runs = conn.execute("SELECT machine, run_id, record->>'outcome' FROM loopctl.runs "
                            "ORDER BY recorded_at").fetchall()
        [entry] = [r[0] for r in conn.execute("SELECT entry FROM loopctl.loop_state")]
    return claims, runs, entry


@pytest.mark.slow
def test_a_restart_shorter_than_the_stale_window_costs_the_run_nothing(
        tmp_path: Path, pg_cluster: Cluster, pg_dsn: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPCTL_STORE_RENEW", "0.5")
    monkeypatch.setenv("LOOPCTL_STORE_STALE", "20")
    opened = start_first_run(tmp_path, pg_dsn, pg_dsn, pg_dsn)
    m2, first, path = opened.m2, opened.proc, opened.marks
    slot, later, run1 = opened.slot, opened.later, opened.run_id
    try:
        pg_cluster.restart()  # fast: every connection cut, the server back at once
        beats = len(marks(path))
        _, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err
    timeline = marks(path)
    assert ("end", run1) in timeline and len(timeline) > beats, timeline  # it ran on
    # The slot is served: no machine runs it again, and firing resumes.
    again = m2.run("run", "hourly", "--scheduled", "--slot", slot)
    assert again.returncode == 0 and f"already ran: run {run1}" in again.stderr, again.stderr
    assert m2.run("run", "hourly", "--scheduled", "--slot", later).returncode == 0
    claims, runs, entry = store_view(pg_dsn)
    run2 = next(r for kind, r in marks(path) if kind == "start" and r != run1)
    assert claims == [(f"schedule:{slot}", run1, "m1", False),
                      (f"schedule:{later}", run2, "m2", False)], claims
    assert sorted(runs) == sorted([("m1", run1, "ok"), ("m2", run2, "ok")]), runs
    assert [r for kind, r in marks(path) if kind == "start"] == [run1, run2]
    assert entry["iterations"] == 2 and not entry.get("run"), entry


@pytest.mark.slow
def test_a_server_down_past_the_stale_window_has_the_fence_kill_and_the_run_settled_once(
        tmp_path: Path, pg_cluster: Cluster, pg_dsn: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    stale = 3
    monkeypatch.setenv("LOOPCTL_STORE_RENEW", "0.5")
    monkeypatch.setenv("LOOPCTL_STORE_STALE", str(stale))
    opened = start_first_run(tmp_path, pg_dsn, pg_dsn, pg_dsn)
    m1, m2, first, path = opened.m1, opened.m2, opened.proc, opened.marks
    slot, later, run1 = opened.slot, opened.later, opened.run_id
    record = m1.home / "loopctl" / "state" / "runs" / "hourly"
    try:
        pg_cluster.stop()
        try:  # the fence kills the agent within the window; its supervisor ends
            first.communicate(timeout=60)
        finally:
            pg_cluster.start()
    finally:
        if first.poll() is None:
            first.kill()
    assert ("end", run1) not in marks(path), marks(path)
    kept = json.loads((record / f"{run1}.json").read_text())
    assert kept["outcome"] == "killed" and "could not be renewed" in kept["note"], kept
    # Back up: the next passes settle the run once (here, where its record
    # is owed to the team, and there), and m2 fires the next slot.
    wait_for(lambda: m1.run("tick").returncode == 0, timeout=30)
    assert m2.run("run", "hourly", "--scheduled", "--slot", slot).returncode == 0
    assert m2.run("run", "hourly", "--scheduled", "--slot", later).returncode == 0
    m1.run("tick")
    claims, runs, entry = store_view(pg_dsn)
    settled = [r for r in runs if r[1] == run1]
    assert len(settled) == 1 and settled[0][2] in ("killed", "lost"), runs
    assert [r for kind, r in marks(path) if kind == "start"].count(run1) == 1
    assert len([c for c in claims if c[0] == f"schedule:{slot}"]) == 1, claims
    assert entry["iterations"] == 2 and not entry.get("run"), entry
    assert entry["tally"]["runs"] == {o: 1 for o in (settled[0][2], "ok")}, entry
