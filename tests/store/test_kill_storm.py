"""A kill storm (issue 54 "Test what breaks distributed schedulers"): three
machines in their own pid namespaces race daemons and ticks for two loops
while a killer SIGKILLs their supervisors and drivers; then every machine
dies and the team settles. The store and every machine's records must say:
each slot claimed once and its body run at most once, no two bodies of a
loop at once, each claim settled by one record (a lost claim by one `lost`),
the counters equal to the runs. tests/store/storm.py; bench/store_storm.py
runs the same for minutes."""

from __future__ import annotations

from pathlib import Path

import pytest

from store.storm import Storm, check, read_marks, summary, timed

pytestmark = pytest.mark.real_processes

RENEW, STALE = 0.5, 3
STORM_S = 20


@pytest.mark.slow
def test_a_kill_storm_runs_each_slot_once_and_records_each_lost_run_once(
        tmp_path: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPCTL_STORE_RENEW", str(RENEW))
    monkeypatch.setenv("LOOPCTL_STORE_STALE", str(STALE))
    storm = Storm(tmp_path, pg_dsn)
    storm.setup()
    times: dict[str, float] = {}
    storm.start()
    try:
        timed("storm", times, lambda: storm.rage(STORM_S))
    finally:
        timed("stop", times, storm.stop)
    timed("settle", times, lambda: storm.settle(STALE))
    broken = check(storm)
    assert not broken, "\n".join([*broken, "killed: " + "; ".join(storm.killed), str(times)])
    # The storm was one: bodies ran, and supervisors died mid-run.
    marks = read_marks(storm.marks)
    assert len({m.run_id for m in marks}) >= 4, storm.killed
    assert sum("supervisor" in k for k in storm.killed) >= 3, storm.killed
    print(times, summary(storm))
