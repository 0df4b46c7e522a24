"""When a loop fires (DESIGN §3-§5): reconciling loops.yaml with the state,
claiming a due run exactly once, coalescing fires that come due during a run
(`overlap` queue, skip, replace), runs lost with their supervisor and the
orphans they leave, missed time collapsing into one catch-up, a clock set back,
and a cron loop keeping its zone through every transition. Driven with a fake
clock and a fake process table (lifecycle_support.py), never a real process.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from fixed_zone import zone_of
from lifecycle_support import (
    AGENT,
    DAY,
    HOUR,
    MINUTE,
    SUPERVISOR,
    T0,
    World,
    fired_names,
    make,
    ts,
)

from loopctl.domain import lifecycle, verbs
from loopctl.domain.schedule import cron_next
from loopctl.domain.state import new_loop_state

# -- reconcile ---------------------------------------------------------------------


def test_reconcile_adds_new_loops_once() -> None:
    loop = make()
    state: dict[str, Any] = {"loops": {}}
    assert lifecycle.reconcile({"job": loop}, {}, state, T0, zone_of) is True
    assert state["loops"]["job"].status == "active"
    assert state["loops"]["job"].next_due == T0
    assert lifecycle.reconcile({"job": loop}, {}, state, T0 + 5, zone_of) is False


def test_reconcile_drops_removed_loops_but_keeps_invalid_ones() -> None:
    a, b = make("a"), make("b")
    state: dict[str, Any] = {"loops": {}}
    lifecycle.reconcile({"a": a, "b": b}, {}, state, T0, zone_of)
    assert lifecycle.reconcile({"a": a}, {"b": "bad cron"}, state, T0, zone_of) is False
    assert set(state["loops"]) == {"a", "b"}
    assert lifecycle.reconcile({"a": a}, {}, state, T0, zone_of) is True
    assert set(state["loops"]) == {"a"}


def test_reconcile_keeps_a_removed_loop_while_its_run_is_in_flight() -> None:
    w = World(make())
    w.fire(T0)
    lifecycle.reconcile({}, {}, w.state, T0 + 1, zone_of)
    assert "job" in w.state["loops"]


def test_reconcile_moves_the_deadline_when_for_changes() -> None:
    w = World(make(**{"for": "1d"}))
    assert w.st.deadline == T0 + DAY
    longer = make(**{"for": "3d"})
    assert lifecycle.reconcile({"job": longer}, {}, w.state, T0 + HOUR, zone_of) is True
    assert w.st.deadline == T0 + 3 * DAY  # from the original start, not from now


def test_created_at_in_the_definition_sets_the_start() -> None:
    loop = make(created_at="2026-01-01T00:00:00Z", **{"for": "1h"})
    st = new_loop_state(loop, T0 + 5 * HOUR, zone=zone_of(loop))
    assert st.created == ts("2026-01-01T00:00:00Z")
    assert st.deadline == ts("2026-01-01T01:00:00Z")


# -- claim: exactly once -------------------------------------------------------------


def test_due_loop_is_claimed_with_run_details() -> None:
    w = World(make())
    run = w.fire(T0)
    assert run["iteration"] == 1
    assert run["due_at"] == T0
    assert run["missed"] == 0
    assert run["trigger"] == "schedule"
    assert run["run_id"] == "20260101T000300Z-0001"
    assert w.st.run is run
    assert w.st.iterations == 1


def test_due_loop_is_claimed_exactly_once_at_the_same_now() -> None:
    w = World(make())
    w.fire(T0)
    again = w.plan(T0)
    assert again.fired == []
    assert any(name == "job" and "running" in why for name, why in again.skipped)
    assert w.st.iterations == 1


def test_every_loop_never_fires_again_while_its_run_is_in_flight() -> None:
    w = World(make())
    w.fire(T0)
    for later in (T0 + 10 * MINUTE, T0 + HOUR, T0 + 5 * HOUR):
        assert w.plan(later).fired == []
    assert w.st.pending is False
    assert w.st.iterations == 1


def test_not_due_loop_is_skipped() -> None:
    w = World(make())
    w.cycle(T0, T0 + 30)
    result = w.plan(T0 + 30 + 599)
    assert result.fired == []
    assert ("job", "not due") in result.skipped
    assert fired_names(w.plan(T0 + 30 + 600)) == ["job"]


def test_run_ids_sort_by_time_and_sequence() -> None:
    w = World(make(every="1s"))
    ids = []
    for i in range(3):
        ids.append(w.fire(T0 + 10 * i)["run_id"])
        w.finish(T0 + 10 * i + 1)
    assert ids == sorted(ids)
    assert [i.rsplit("-", 1)[1] for i in ids] == ["0001", "0002", "0003"]


# -- coalescing ------------------------------------------------------------------


def cron_world(overlap: str) -> tuple[World, float]:
    loop = make(cron="*/10 * * * *", tz="UTC", overlap=overlap)
    w = World(loop)
    first = ts("2026-01-01T00:10:00Z")
    assert w.st.next_due == first
    w.fire(first)
    return w, first


def test_cron_fire_due_during_a_run_is_queued_as_one_pending_fire() -> None:
    w, first = cron_world("queue")
    result = w.plan(first + 10 * MINUTE + 30)
    assert result.fired == [] and result.replace == []
    assert w.st.pending is True
    assert w.st.next_due == first + 20 * MINUTE
    # Another slot passes: still one pending fire, not two.
    w.plan(first + 20 * MINUTE + 30)
    assert w.st.pending is True
    assert w.st.iterations == 1


def test_cron_fire_due_during_a_run_is_dropped_with_skip() -> None:
    w, first = cron_world("skip")
    result = w.plan(first + 10 * MINUTE + 30)
    assert result.fired == [] and result.replace == []
    assert w.st.pending is False
    end = first + 12 * MINUTE
    w.finish(end)
    assert w.st.next_due == first + 20 * MINUTE  # the next slot, no catch-up


def test_cron_fire_due_during_a_run_replaces_it_with_replace() -> None:
    w, first = cron_world("replace")
    run = w.st.run
    result = w.plan(first + 10 * MINUTE + 30)
    assert result.fired == []
    assert result.replace == [("job", run)]
    assert w.st.pending is True


def test_settle_with_a_pending_fire_makes_it_due_at_once() -> None:
    w, first = cron_world("queue")
    w.plan(first + 10 * MINUTE + 30)
    end = first + 15 * MINUTE
    w.finish(end)
    assert w.st.next_due == end
    assert w.st.pending is False
    result = w.plan(end)
    assert fired_names(result) == ["job"]
    assert w.st.iterations == 2


def test_queue_after_a_long_run_gives_exactly_one_catch_up() -> None:
    w, first = cron_world("queue")
    for k in range(1, 6):  # five slots pass during a 55-minute run
        w.plan(first + k * 10 * MINUTE + 1)
    end = first + 55 * MINUTE
    w.finish(end)
    assert fired_names(w.plan(end)) == ["job"]
    w.finish(end + 60)
    assert w.plan(end + 61).fired == []


def test_cron_slot_passed_unseen_during_a_run_is_queued_once_at_settle() -> None:
    # No driver ran while the slot passed (e.g. `run NAME` by hand, no cron):
    # with queue the missed slot fires once when the run ends.
    w, first = cron_world("queue")
    end = first + 25 * MINUTE  # the 00:20 slot passed with nobody looking
    w.finish(end)
    assert w.st.next_due == end
    assert fired_names(w.plan(end)) == ["job"]


def test_cron_slot_passed_unseen_during_a_run_is_dropped_with_skip() -> None:
    w, first = cron_world("skip")
    end = first + 25 * MINUTE
    w.finish(end)
    assert w.st.next_due == first + 30 * MINUTE


# -- lost runs and orphans ---------------------------------------------------------


def test_lost_run_is_recorded_and_cleared_and_the_schedule_goes_on() -> None:
    w = World(make())
    run = w.fire(T0)
    w.procs.live.clear()  # supervisor and agent both gone (reboot)
    now = T0 + 5 * MINUTE
    result = w.plan(now)
    assert result.lost == [("job", run)]
    assert result.fired == []
    assert w.st.run is None
    assert w.st.orphan is None
    assert w.st.last_outcome == "lost"
    assert w.st.status == "active"
    # A failure toward --max-failures (DESIGN §5), so the delay backs off x2.
    assert w.st.failures == 1
    assert w.st.next_due == now + 20 * MINUTE


def test_lost_runs_reach_the_failure_limit() -> None:
    # An agent that kills its supervisor at every run must not escape
    # --max-failures (default 3) by doing it again and again.
    w = World(make())
    now = T0
    for _ in range(3):
        w.fire(now)
        w.procs.live.clear()
        w.plan(now + 60)  # finds it lost
        now += DAY
    assert (w.st.status, w.st.reason, w.st.failures) == ("paused", "failure_limit", 3)
    assert w.plan(now).fired == []


def test_lost_run_with_a_live_agent_leaves_an_orphan_that_blocks_firing() -> None:
    w = World(make())
    w.fire(T0)
    w.procs.kill(SUPERVISOR)  # supervisor kill -9'd; its agent still runs
    result = w.plan(T0 + 60)
    assert [name for name, _ in result.lost] == ["job"]
    assert w.st.orphan == AGENT
    later = T0 + 60 + 20 * MINUTE  # due again (backed off: a lost run is a failure)
    blocked = w.plan(later)
    assert blocked.fired == []
    assert any("still alive" in why for _, why in blocked.skipped)
    w.procs.kill(AGENT)
    assert fired_names(w.plan(later + 1)) == ["job"]
    assert w.st.orphan is None


def test_pause_asked_during_a_run_that_is_then_lost_still_takes_effect() -> None:
    # DESIGN §4: pause during a run takes effect when the run settles; a lost
    # run is settled by the next driver, and must not forget the pause.
    w = World(make())
    w.fire(T0)
    w.st.pause(T0 + 1)
    w.procs.live.clear()
    w.plan(T0 + 60)
    assert (w.st.status, w.st.reason) == ("paused", "user")
    assert w.plan(T0 + DAY - 1).fired == []


def test_stop_asked_during_a_run_that_is_then_lost_still_takes_effect() -> None:
    w = World(make())
    w.fire(T0)
    w.st.stop(T0 + 1)
    w.procs.live.clear()
    w.plan(T0 + 60)
    assert w.st.status == "stopped"
    assert w.plan(T0 + DAY - 1).fired == []


def test_run_lost_while_its_definition_was_invalid_resumes_once_fixed() -> None:
    w = World(make())
    w.fire(T0)
    w.procs.live.clear()
    result = lifecycle.plan({}, {"job": "bad 'every'"}, w.state, T0 + 60, w.procs, zones=zone_of)
    assert [name for name, _ in result.lost] == ["job"]
    # The user fixes loops.yaml (same schedule): the loop must fire again.
    lifecycle.reconcile({"job": w.loop}, {}, w.state, T0 + HOUR, zone_of)
    assert fired_names(w.plan(T0 + HOUR)) == ["job"]


def test_running_with_a_live_supervisor_is_not_lost() -> None:
    w = World(make())
    w.fire(T0)
    result = w.plan(T0 + HOUR)
    assert result.lost == []
    assert w.st.run is not None


# -- missed time -------------------------------------------------------------------


def test_missed_time_collapses_into_one_catch_up_with_the_count() -> None:
    w = World(make(every="1h"))
    w.cycle(T0, T0 + 60)
    due = T0 + 60 + HOUR
    now = due + 10 * HOUR + 5  # asleep ten more hours
    result = w.plan(now)
    assert fired_names(result) == ["job"]
    assert result.fired[0][1]["missed"] == 10
    assert result.fired[0][1]["due_at"] == due
    assert w.plan(now + 1).fired == []


def test_cron_missed_time_collapses_into_one_catch_up_then_next_slot() -> None:
    w = World(make(cron="0 * * * *", tz="UTC"))
    due = ts("2026-01-01T01:00:00Z")
    assert w.st.next_due == due
    now = ts("2026-01-01T06:30:00Z")
    result = w.plan(now)
    assert fired_names(result) == ["job"]
    assert result.fired[0][1]["missed"] == 5  # 02:00 .. 06:00
    w.finish(now + 60)
    assert w.st.next_due == ts("2026-01-01T07:00:00Z")


def test_catch_up_none_skips_a_long_missed_fire() -> None:
    w = World(make(every="1h", catch_up="none"))
    w.cycle(T0, T0 + 60)
    now = T0 + 60 + HOUR + 10 * HOUR
    result = w.plan(now)
    assert result.fired == []
    assert ("job", "missed (catch-up none)") in result.skipped
    assert w.st.next_due == now + HOUR
    assert w.st.iterations == 1


def test_catch_up_none_still_fires_a_slightly_late_tick() -> None:
    w = World(make(every="1h", catch_up="none"))
    w.cycle(T0, T0 + 60)
    assert fired_names(w.plan(T0 + 60 + HOUR + 30)) == ["job"]


def test_cron_catch_up_none_waits_for_the_next_slot() -> None:
    w = World(make(cron="0 * * * *", tz="UTC", catch_up="none"))
    now = ts("2026-01-01T06:30:00Z")
    assert w.plan(now).fired == []
    assert w.st.next_due == ts("2026-01-01T07:00:00Z")


# -- clock set back --------------------------------------------------------------


def test_clock_set_back_rearms_an_every_loop_from_now() -> None:
    w = World(make())
    w.cycle(T0, T0 + 60)
    w.st.next_due = T0 + 365 * DAY  # computed while the clock was a year ahead
    now = T0 + 120
    result = w.plan(now)
    assert result.changed
    assert result.fired == []  # as if the last run ended now: no duplicate run
    assert w.st.next_due == now + 600  # and no stall beyond one interval
    assert "clock" in (w.st.note or "")


def test_clock_set_back_rearms_a_cron_loop_at_its_next_slot() -> None:
    w = World(make(cron="0 * * * *", tz="UTC"))
    w.st.next_due = T0 + 365 * DAY
    result = w.plan(T0)
    assert result.fired == []
    assert w.st.next_due == cron_next("0 * * * *", ZoneInfo("UTC"), T0)


def test_cron_after_is_not_mistaken_for_a_clock_change() -> None:
    # `--after 1d` on a cron loop: the first slot is a day out, which is
    # correct, not a sign that the clock went back (DESIGN §3 --after).
    w = World(make(cron="*/10 * * * *", tz="UTC", after="1d"))
    first = ts("2026-01-02T00:10:00Z")
    assert w.st.next_due == first
    assert w.plan(T0).fired == []
    assert w.plan(ts("2026-01-01T00:10:00Z")).fired == []
    assert w.st.next_due == first
    assert fired_names(w.plan(first)) == ["job"]


def test_legitimate_backoff_is_not_mistaken_for_a_clock_change() -> None:
    w = World(make(max_failures=10))
    now = T0
    for _ in range(4):
        w.fire(now)
        w.finish(now + 1, outcome="failed", started=now)
        now = w.st.next_due
    end = w.st.last_end
    assert w.st.next_due == end + 8 * 600
    w.plan(end + 1)
    assert w.st.next_due == end + 8 * 600
    assert w.st.note is None


# -- a cron loop's zone -----------------------------------------------------------


def test_a_cron_loop_keeps_the_zone_it_is_given_through_every_transition() -> None:
    """The zone comes in from the edge (`clock.zone_of` in the drivers): a loop
    without `--tz` on a machine in Tokyo is armed, claimed, coalesced while
    in flight, settled, lost and resumed at 09:00 Tokyo, never 09:00 UTC."""
    tokyo = ZoneInfo("Asia/Tokyo")
    w = World(make(cron="0 9 * * *", overlap="skip"), zones=lambda loop: tokyo)

    def at_nine_in_tokyo(when: float) -> bool:
        local = datetime.fromtimestamp(when, tokyo)
        return (local.hour, local.minute, local.second) == (9, 0, 0)

    first = w.st.next_due
    assert at_nine_in_tokyo(first)                      # new_loop_state
    w.fire(first)
    assert w.st.next_due == first + DAY              # claim
    w.plan(first + DAY + 1)
    assert w.st.next_due == first + 2 * DAY          # a slot passed in flight
    w.finish(first + DAY + 2)
    assert w.st.next_due == first + 2 * DAY          # settle keeps the tracked slot
    w.fire(first + 2 * DAY)
    w.procs.live.clear()
    w.plan(first + 3 * DAY + 5)                         # the run is lost
    assert w.st.next_due == first + 4 * DAY
    w.st.pause(first + 3 * DAY + 6)
    verbs.resume(w.loop, w.st, first + 5 * DAY, zone=tokyo)
    assert w.st.next_due == first + 6 * DAY          # resume re-arms in the zone
