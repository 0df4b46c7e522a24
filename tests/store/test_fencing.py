"""Fencing (DESIGN §21): a run's supervisor renews its claim in the team
store; one that cannot renew kills its agent before the claim goes stale.
The link is cut by a proxy (tests/store/proxy.py), the times scaled down
(LOOPCTL_STORE_RENEW, LOOPCTL_STORE_STALE)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from conftest import wait_for
from loopctl.domain.timestamps import parse_iso
from store.machines import machines
from store.proxy import Proxy

pytestmark = pytest.mark.real_processes

LONG = """\
version: 1
store: {dsn}
loops:
  long:
    prompt: echo $$ > {pid}; exec sleep 600
    agent: shell
    every: 1h
    cwd: {cwd}
    timeout: 30m
"""
RENEW, STALE = 1, 5


def renewed(dsn: str) -> tuple[float, float] | None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT extract(epoch FROM claimed_at), "
                           "extract(epoch FROM renewed_at) FROM loopctl.slot_claims").fetchone()
    return None if row is None else (float(row[0]), float(row[1]))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_a_supervisor_that_cannot_renew_kills_its_agent_before_the_claim_is_stale(
        tmp_path: Path, pg_dsn: str, proxy: Proxy, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPCTL_STORE_RENEW", str(RENEW))
    monkeypatch.setenv("LOOPCTL_STORE_STALE", str(STALE))
    parts = urlsplit(pg_dsn)
    dsn = parts._replace(netloc=f"{parts.username}@127.0.0.1:{proxy.port}").geturl()
    [m1] = machines(tmp_path / "machines", 1)
    pid_file = tmp_path / "agent.pid"
    m1.define(LONG.format(dsn=dsn, pid=pid_file, cwd=tmp_path))
    assert m1.run("store", "init").returncode == 0
    fired = json.loads(m1.run("tick", "--json").stdout)["fired"]
    assert len(fired) == 1
    agent = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 30))
    record = m1.home / "loopctl" / "state" / "runs" / "long" / f"{fired[0]['run_id']}.json"
    try:
        # Renewed while the link holds: the heartbeat moves past the claim.
        wait_for(lambda: (r := renewed(pg_dsn)) and r[1] >= r[0] + 2 * RENEW, timeout=30)
        assert alive(agent)
        proxy.cut()
        wait_for(record.exists, timeout=3 * STALE)
    finally:
        if alive(agent):  # the fence failed: leave no agent behind
            os.kill(agent, 9)
    ran = json.loads(record.read_text())
    last_renewed = renewed(pg_dsn)
    assert last_renewed is not None
    assert ran["outcome"] == "killed" and "could not be renewed" in ran["note"], ran
    assert not alive(agent)
    # Dead before anyone could call the claim stale.
    assert parse_iso(ran["ended_at"]) < last_renewed[1] + STALE, (ran, last_renewed)


@pytest.mark.slow
def test_a_run_whose_renewals_succeed_is_not_fenced(tmp_path: Path, pg_dsn: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPCTL_STORE_RENEW", "0.5")
    monkeypatch.setenv("LOOPCTL_STORE_STALE", "2")
    [m1] = machines(tmp_path / "machines", 1)
    pid_file = tmp_path / "agent.pid"
    m1.define(LONG.format(dsn=pg_dsn, pid=pid_file, cwd=tmp_path)
              .replace("exec sleep 600", "exec sleep 4"))
    assert m1.run("store", "init").returncode == 0
    done = m1.run("run", "long")  # due: it serves the loop's first slot
    assert done.returncode == 0, done.stderr  # ran twice as long as a claim stays fresh
    renewals = renewed(pg_dsn)
    assert renewals is not None and renewals[1] >= renewals[0] + 2


def test_a_claim_recorded_lost_elsewhere_stops_its_agent_at_the_next_renewal(
        tmp_path: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another machine found the run lost (its claim marked so): the
    supervisor's next renewal is refused and its fence kills the agent then,
    not a stale window later."""
    monkeypatch.setenv("LOOPCTL_STORE_RENEW", "0.5")
    monkeypatch.setenv("LOOPCTL_STORE_STALE", "30")
    [m1] = machines(tmp_path / "machines", 1)
    pid_file = tmp_path / "agent.pid"
    m1.define(LONG.format(dsn=pg_dsn, pid=pid_file, cwd=tmp_path))
    assert m1.run("store", "init").returncode == 0
    fired = json.loads(m1.run("tick", "--json").stdout)["fired"]
    agent = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 30))
    record = m1.home / "loopctl" / "state" / "runs" / "long" / f"{fired[0]['run_id']}.json"
    try:
        with psycopg.connect(pg_dsn) as conn:
            conn.execute("UPDATE loopctl.slot_claims SET lost_at = now()")
        wait_for(lambda: not alive(agent), timeout=10)  # a third of the stale window
    finally:
        if alive(agent):
            os.kill(agent, 9)
    ran = json.loads(wait_for(lambda: record.exists() and record.read_text(), timeout=30))
    assert ran["outcome"] == "killed" and "recorded lost" in ran["note"], ran
