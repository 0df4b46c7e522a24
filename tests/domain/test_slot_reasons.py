"""Every reason of DESIGN §20 is written by some driver path (issue 50
item 2): `missed`, `catch_up_none`, `outside_window`, `overlap_skip`,
`gate_no_work`, `deferred` (a usage limit, the concurrency cap) and `held`,
each from the pass or the settle that decides it, on a fake clock."""

from __future__ import annotations

from typing import Any
from zoneinfo import ZoneInfo

import pytest
from fixed_zone import UTC, zone_of
from lifecycle_support import HOUR, MINUTE, SUPERVISOR, Procs, World, make, ts

from loopctl.domain import capacity, lifecycle, slots
from loopctl.domain.accounts import AccountMark, Verdict
from loopctl.domain.schedule import cron_next, missed_count

S = ts("2026-01-01T01:00:00Z")  # the first slot of an hourly loop made at 00:03


def hourly(**raw: Any) -> World:
    return World(make(cron="0 * * * *", **raw))


def reasons(result: lifecycle.Pass) -> list[tuple[str, Any]]:
    return [(e.reason, e.count) for _, e in result.slot_skips]


def test_missed_slots_fold_into_the_catch_up() -> None:
    result = hourly().plan(S + 3 * HOUR + MINUTE)
    assert reasons(result) == [("missed", 3)]
    assert result.slot_skips[0][1].run_id == result.fired[0][1]["run_id"]


def test_catch_up_none_and_the_window_skip_the_late_slot() -> None:
    assert reasons(hourly(catch_up="none").plan(S + 3 * HOUR + 30 * MINUTE)) == \
        [("catch_up_none", 4)]
    assert reasons(hourly(catch_up_window="20m").plan(S + 3 * HOUR + 30 * MINUTE)) == \
        [("outside_window", 4)]  # the 3 missed before it counted in


def test_a_slot_due_beside_a_run_is_skipped_under_overlap_skip() -> None:
    w = hourly(overlap="skip")
    w.fire(S)
    assert reasons(w.plan(S + HOUR)) == [("overlap_skip", None)]


def test_a_gate_that_found_no_work_counts_its_slot() -> None:
    w = hourly()
    w.fire(S)
    w.finish(S + MINUTE, outcome="skipped")
    assert w.st.skips["counts"] == {"gate_no_work": 1}  # its record is the run's own


class Held:
    """An account gate whose account is rate-limited until `until`."""

    def __init__(self, until: float) -> None:
        self.entry = AccountMark(kind="rate_limited", preset="claude", since=S, until=until,
                                 loop="other", run_id="r1", error=None, fix="wait",
                                 loops=["other"])

    def check(self, loop: Any, now: float) -> Verdict:
        return Verdict(entry=self.entry) if now < (self.entry.until or 0.0) else Verdict()


def test_a_slot_held_by_its_account_then_the_slots_its_hold_deferred() -> None:
    w = hourly()
    gate = Held(until=S + 2 * HOUR + 30 * MINUTE)

    def plan(now: float) -> lifecycle.Pass:
        return lifecycle.plan({w.loop.name: w.loop}, {}, w.state, now, w.procs,
                              zones=w.zones, accounts=gate)

    assert reasons(plan(S)) == [("held", None)]
    assert (w.st.status, w.st.reason) == ("paused", "rate_limited")
    assert reasons(plan(S + HOUR)) == []  # deferred: nothing fires, nothing counted twice
    resumed = plan(S + 2 * HOUR + 31 * MINUTE)
    # S+1h came due while held and never runs; S+2h is the resuming fire's.
    assert reasons(resumed) == [("deferred", 1)]
    assert [run["slot"] for _, run in resumed.fired] == [slots.label(S + 2 * HOUR)]
    assert w.st.skips["counts"] == {"held": 1, "deferred": 1}


def test_the_slots_a_rate_limited_run_deferred_are_on_record() -> None:
    w = hourly()
    w.fire(S)
    w.finish(S + 5 * MINUTE, outcome="deferred", reset_at=S + 3 * HOUR + 30 * MINUTE)
    assert (w.st.status, w.st.reason) == ("paused", "rate_limited")
    assert reasons(w.plan(S + 2 * HOUR)) == []
    resumed = w.plan(S + 3 * HOUR + 31 * MINUTE)
    assert reasons(resumed) == [("deferred", 2)]  # S+1h, S+2h; S+3h runs now
    entry = resumed.slot_skips[0][1]
    assert entry.by == "usage_limit" and entry.at == "2026-01-01T04:31:00Z"
    assert [run["slot"] for _, run in resumed.fired] == [slots.label(S + 3 * HOUR)]
    # A deferral with no slot in between defers none.
    w2 = hourly()
    w2.fire(S)
    w2.finish(S + 5 * MINUTE, outcome="deferred", reset_at=S + 20 * MINUTE)
    assert reasons(w2.plan(S + 21 * MINUTE)) == []


def test_slots_that_passed_while_the_cap_held_the_loop_back_are_deferred() -> None:
    job, other = make(cron="0 * * * *"), make("other", every="10h")
    loops = {"job": job, "other": other}
    state: dict[str, Any] = {"loops": {}}
    lifecycle.reconcile(loops, {}, state, S - 50 * MINUTE, zone_of)
    busy = state["loops"]["other"]
    lifecycle.claim(other, busy, S - MINUTE, "manual", zone=UTC)
    busy.run["supervisor"] = SUPERVISOR
    procs = Procs(SUPERVISOR)

    def plan(now: float) -> lifecycle.Pass:
        return lifecycle.plan(loops, {}, state, now, procs, zones=zone_of,
                              caps=capacity.Caps(total=1))

    assert [n for n, _ in plan(S).queued] == ["job"]
    assert [n for n, _ in plan(S + 2 * HOUR).queued] == ["job"]
    procs.kill(SUPERVISOR)  # its run ends: the cap frees
    result = plan(S + 2 * HOUR + 10 * MINUTE)
    assert [run["slot"] for n, run in result.fired if n == "job"] == \
        [slots.label(S + 2 * HOUR)]
    assert [(n, e.reason, e.count) for n, e in result.slot_skips] == \
        [("job", "deferred", 2)]


def test_the_reasons_are_the_designs() -> None:
    """The tests above write each of these, one or two a test
    (definition_differs: tests/store/test_slot_claims.py, on a team store)."""
    assert set(slots.REASONS) == {"missed", "catch_up_none", "outside_window",
                                  "overlap_skip", "gate_no_work", "deferred", "held",
                                  "definition_differs"}


ZONES = ["UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe"]
EXPRS = ["0 * * * *", "*/7 * * * *", "30 1,2,3 * * *", "0 9 * * 1-5", "15 2 8-14 3,11 0"]


@pytest.mark.parametrize("tz", ZONES)
@pytest.mark.parametrize("expr", EXPRS)
def test_one_walk_says_what_missed_count_and_cron_latest_say(expr: str, tz: str) -> None:
    """A due pass walks the schedule once (slots.walk_due) for what two
    walks said: the occurrences missed and the latest instant, through DST
    changes (New York's and Berlin's in March and November, Lord Howe's
    half hour), whether the due time is an instant or not."""
    zone = ZoneInfo(tz)
    loop = make(cron=expr, tz=tz)
    start = ts("2026-03-07T00:00:00Z")
    due = start
    for step in range(60):
        due = cron_next(expr, zone, due) if step % 3 else due + 1234.5  # instants and not
        for late in (0.0, 59.0, 3600.0, 4 * 3600.0 + 17, 3 * 86400.0):
            # Three days late is ~600 slots of `*/7` walked twice, and the
            # windows of neighbouring steps are nearly the same: every 4th
            # step walks them (both kinds of due, 4 and 3 being coprime).
            if late > 86400 and step % 4:
                continue
            now = due + late
            assert slots.walk_due(loop, due, now, zone) == \
                (missed_count(loop, due, now, zone=zone), slots.cron_latest(expr, zone, now)), \
                (step, due, late)
        if step == 30:
            due = ts("2026-10-30T00:00:00Z")
