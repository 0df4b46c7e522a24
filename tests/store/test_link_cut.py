"""A machine's link to the store cut mid-run, for longer than the stale
window, while the server and the other machines carry on (issue 54 "a
connection cut"; DESIGN §21 "Liveness and fencing", "Failing closed").
test_fencing.py shows the fence's kill and its timing, test_store_down.py a
daemon that fires nothing while cut; here the team's side of it: m1's
tick fires nothing while cut, m2 records the run lost once and does not run
its slot again, and once the link is mended the run has one record."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from conftest import wait_for
from store.first_run import start_first_run
from store.proxy import Proxy
from store.test_frozen_machine import marks, stale

pytestmark = pytest.mark.real_processes

STALE = 3


@pytest.mark.slow
def test_a_machine_cut_off_past_the_stale_window_loses_its_run_once(
        tmp_path: Path, pg_dsn: str, proxy: Proxy, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPCTL_STORE_RENEW", "0.5")
    monkeypatch.setenv("LOOPCTL_STORE_STALE", str(STALE))
    monkeypatch.setenv("LOOPCTL_STORE_TIMEOUT", "2")
    parts = urlsplit(pg_dsn)
    cut_dsn = parts._replace(netloc=f"{parts.username}@127.0.0.1:{proxy.port}").geturl()
    opened = start_first_run(tmp_path, cut_dsn, pg_dsn, pg_dsn)
    m1, m2, first, path = opened.m1, opened.m2, opened.proc, opened.marks
    slot, later, run1 = opened.slot, opened.later, opened.run_id
    try:
        proxy.cut()
        first.communicate(timeout=60)  # its fence killed the agent; it cannot settle
        # While cut, m1 fires nothing and says why.
        ticked = m1.run("tick")
        assert ticked.returncode == 3 and "unreachable" in ticked.stderr, ticked.stderr
        wait_for(lambda: stale(pg_dsn, run1), timeout=30)
        # The team carries on: the slot is taken for good, the next one runs.
        again = m2.run("run", "hourly", "--scheduled", "--slot", slot)
        assert again.returncode == 0 and "already ran" in again.stderr, again.stderr
        assert m2.run("run", "hourly", "--scheduled", "--slot", later).returncode == 0
    finally:
        if first.poll() is None:
            first.kill()
    proxy.mend()
    assert m1.run("tick").returncode == 0  # sends what it owed the team
    assert ("end", run1) not in marks(path)
    assert [r for kind, r in marks(path) if kind == "start"].count(run1) == 1
    with psycopg.connect(pg_dsn) as conn:
        runs = conn.execute("SELECT run_id, record->>'outcome' FROM loopctl.runs").fetchall()
        [entry] = [r[0] for r in conn.execute("SELECT entry FROM loopctl.loop_state")]
        claims = conn.execute("SELECT slot FROM loopctl.slot_claims").fetchall()
    assert [r for r in runs if r[0] == run1] in ([(run1, "lost")], [(run1, "killed")]), runs
    assert len(runs) == 2 and len(claims) == 2, (runs, claims)
    assert entry["iterations"] == 2 and not entry.get("run"), entry
    kept = json.loads((m1.home / "loopctl" / "state" / "runs" / "hourly" /
                       f"{run1}.json").read_text())
    assert kept["outcome"] == "killed", kept
