"""`--every` of whole minutes under cron's minute tick (issue 51, item 18):
the due time (a run's end plus the interval) lands a second or two past the
tick that should serve it, so `--every 1m` ran 9 times in 11 minutes. A tick
counts a due time up to 15 s ahead as due for such loops; the daemon (a pass
that is not a minute tick) and other intervals keep the exact time. Driven
with a fake clock (lifecycle_support.py)."""

from __future__ import annotations

import pytest
from fixed_zone import zone_of
from lifecycle_support import MINUTE, T0, World, fired_names, make

from loopctl.domain import lifecycle
from loopctl.domain.schedule import TICK_EARLY_S, tick_early


def tick(w: World, now: float, minute_tick: bool = True) -> lifecycle.Pass:
    return lifecycle.plan({w.loop.name: w.loop}, {}, w.state, now, w.procs, zones=zone_of,
                          minute_tick=minute_tick)


def runs_in(w: World, minutes: int, run_s: float, minute_tick: bool) -> int:
    """Cron's ticks, each 0.4 s past the minute; every run takes `run_s`."""
    count = 0
    for minute in range(minutes):
        now = T0 + minute * MINUTE + 0.4
        if fired_names(tick(w, now, minute_tick)):
            w.procs.live.clear()
            w.finish(now + run_s, started=now)
            count += 1
    return count


@pytest.mark.parametrize("run_s", [0.5, 2.0, 12.0])
def test_every_minute_runs_at_every_tick(run_s: float) -> None:
    assert runs_in(World(make(every="1m")), 11, run_s, minute_tick=True) == 11


def test_without_the_tick_rule_it_skipped_ticks() -> None:
    """The control: the exact due time misses every other tick."""
    assert runs_in(World(make(every="1m")), 11, 2.0, minute_tick=False) == 6


def test_the_wait_after_a_run_is_never_cut_by_more_than_the_tick_rule() -> None:
    w = World(make(every="5m"))
    w.cycle(T0, T0 + 30)
    due = w.st.next_due
    assert due == T0 + 30 + 5 * MINUTE
    assert fired_names(tick(w, due - TICK_EARLY_S - 0.1)) == []
    assert fired_names(tick(w, due - TICK_EARLY_S)) == ["job"]


def test_the_daemon_and_other_intervals_keep_the_exact_time() -> None:
    w = World(make(every="1m"))
    w.cycle(T0, T0 + 2)
    assert fired_names(tick(w, T0 + 61, minute_tick=False)) == []
    w = World(make(every="90s"))
    w.cycle(T0, T0 + 2)
    assert fired_names(tick(w, T0 + 91)) == []
    assert tick_early(make(every="90s")) == 0.0
    assert tick_early(make(every="auto")) == 0.0
    assert tick_early(make(cron="* * * * *", tz="UTC")) == 0.0
    assert tick_early(make(every="2h")) == TICK_EARLY_S
