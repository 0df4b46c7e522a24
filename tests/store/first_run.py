"""The opening the mid-run failure tests share (server restart, link cut):
two machines in pid namespaces of their own on one loop, m1 running its
slot, its body beating and its claim renewed at least once, so that what
the test breaks next happens mid-run with a live fence."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from conftest import wait_for
from store.machines import Machine, hourly, machines
from store.test_frozen_machine import BODY, marks
from store.test_slot_claims import past_hour


@dataclass
class FirstRun:
    m1: Machine
    m2: Machine
    proc: subprocess.Popen[str]  # m1's `run --scheduled` of `slot`
    marks: Path  # the bodies' start/beat/end marks
    slot: str
    later: str  # the next slot, for m2 to fire after
    run_id: str = ""


def start_first_run(tmp_path: Path, m1_dsn: str, m2_dsn: str, watch_dsn: str) -> FirstRun:
    """m1 (through `m1_dsn`) runs the hourly loop's slot; returns once its
    body beats and its claim was renewed (seen through `watch_dsn`)."""
    path = tmp_path / "marks"
    m1, m2 = machines(tmp_path / "machines", 2, own_pids=True)
    m1.define(hourly(m1_dsn, tmp_path, BODY.format(marks=path)))
    m2.define(hourly(m2_dsn, tmp_path, BODY.format(marks=path)))
    assert m2.run("store", "init").returncode == 0
    slot, later = past_hour(3), past_hour(2)
    run = FirstRun(m1, m2, m1.popen("run", "hourly", "--scheduled", "--slot", slot), path,
                   slot, later)
    try:
        wait_for(lambda: any(kind == "beat" for kind, _ in marks(path)), timeout=30)
        run.run_id = marks(path)[0][1]
        wait_for(lambda: renewed(watch_dsn), timeout=30)
    except BaseException:
        run.proc.kill()
        raise
    return run


def renewed(dsn: str) -> bool:
    """The run's fence has renewed its claim: it holds a connection the
    server's stop will cut."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT renewed_at > claimed_at FROM loopctl.slot_claims").fetchone()
    return bool(row and row[0])
