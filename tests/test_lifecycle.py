"""Lifecycle transitions (DESIGN §3-§5, §7) driven with a fake clock and a fake
process table: `alive` is a set of live pids, never a real process."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from fixed_zone import zone_of

from loopctl.domain import lifecycle, valves
from loopctl.domain.errors import UsageError
from loopctl.domain.lifecycle import RunResult
from loopctl.domain.model import LoopDef, parse_loop
from loopctl.domain.schedule import Zones, cron_next
from loopctl.domain.state import new_loop_state

MINUTE, HOUR, DAY = 60, 3600, 86400
T0 = datetime.fromisoformat("2026-01-01T00:03:00+00:00").timestamp()
SUPERVISOR = {"pid": 4101, "ct": 1.0}
AGENT = {"pid": 4102, "ct": 2.0}


def ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def make(name: str = "job", **raw: Any) -> LoopDef:
    raw.setdefault("prompt", "p")
    if "cron" not in raw:
        raw.setdefault("every", "10m")
    return parse_loop(name, raw)


class Procs:
    """A fake process table: a ref is alive when its pid is in `live`."""

    def __init__(self, *refs: dict[str, Any]) -> None:
        self.live = {r["pid"] for r in refs}

    def __call__(self, ref: dict[str, Any] | None) -> bool:
        return bool(ref) and ref["pid"] in self.live

    def kill(self, ref: dict[str, Any]) -> None:
        self.live.discard(ref["pid"])


class World:
    """One loop, its state and the driver's view of processes."""

    def __init__(self, loop: LoopDef, now: float = T0, zones: Zones = zone_of) -> None:
        self.loop = loop
        self.zones = zones
        self.state: dict[str, Any] = {"loops": {}}
        self.procs = Procs()
        assert lifecycle.reconcile({loop.name: loop}, {}, self.state, now, zones)

    @property
    def st(self) -> dict[str, Any]:
        return self.state["loops"][self.loop.name]

    def plan(self, now: float) -> lifecycle.Pass:
        return lifecycle.plan({self.loop.name: self.loop}, {}, self.state, now, self.procs,
                              zones=self.zones)

    def fire(self, now: float) -> dict[str, Any]:
        """A driver pass that must fire; the supervisor then starts (alive)."""
        result = self.plan(now)
        assert [name for name, _ in result.fired] == [self.loop.name], result
        run = result.fired[0][1]
        run["supervisor"] = dict(SUPERVISOR)
        run["agent"] = dict(AGENT)
        self.procs.live |= {SUPERVISOR["pid"], AGENT["pid"]}
        return run

    def finish(self, now: float, outcome: str = "ok", started: float | None = None,
               decision: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        self.procs.live -= {SUPERVISOR["pid"], AGENT["pid"]}
        result = RunResult(outcome=outcome, exit_code=0 if outcome == "ok" else 1,
                           started_at=started if started is not None else now,
                           ended_at=now, decision=decision, **kw)
        return lifecycle.settle(self.loop, self.st, result, now, zone=self.zones(self.loop))

    def cycle(self, now: float, end: float, **kw: Any) -> dict[str, Any]:
        self.fire(now)
        return self.finish(end, started=now, **kw)


def decision(kind: str, next_delay_s: float | None = None) -> dict[str, Any]:
    return {"version": 1, "decision": kind, "summary": f"{kind} summary",
            "evidence": "some evidence", "next_delay_s": next_delay_s}


def fired_names(result: lifecycle.Pass) -> list[str]:
    return [name for name, _ in result.fired]


# -- reconcile ---------------------------------------------------------------------


def test_reconcile_adds_new_loops_once() -> None:
    loop = make()
    state: dict[str, Any] = {"loops": {}}
    assert lifecycle.reconcile({"job": loop}, {}, state, T0, zone_of) is True
    assert state["loops"]["job"]["status"] == "active"
    assert state["loops"]["job"]["next_due"] == T0
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
    assert w.st["deadline"] == T0 + DAY
    longer = make(**{"for": "3d"})
    assert lifecycle.reconcile({"job": longer}, {}, w.state, T0 + HOUR, zone_of) is True
    assert w.st["deadline"] == T0 + 3 * DAY  # from the original start, not from now


def test_created_at_in_the_definition_sets_the_start() -> None:
    loop = make(created_at="2026-01-01T00:00:00Z", **{"for": "1h"})
    st = new_loop_state(loop, T0 + 5 * HOUR, zone=zone_of(loop))
    assert st["created"] == ts("2026-01-01T00:00:00Z")
    assert st["deadline"] == ts("2026-01-01T01:00:00Z")


# -- claim: exactly once -------------------------------------------------------------


def test_due_loop_is_claimed_with_run_details() -> None:
    w = World(make())
    run = w.fire(T0)
    assert run["iteration"] == 1
    assert run["due_at"] == T0
    assert run["missed"] == 0
    assert run["trigger"] == "schedule"
    assert run["run_id"] == "20260101T000300Z-0001"
    assert w.st["run"] is run
    assert w.st["iterations"] == 1


def test_due_loop_is_claimed_exactly_once_at_the_same_now() -> None:
    w = World(make())
    w.fire(T0)
    again = w.plan(T0)
    assert again.fired == []
    assert any(name == "job" and "running" in why for name, why in again.skipped)
    assert w.st["iterations"] == 1


def test_every_loop_never_fires_again_while_its_run_is_in_flight() -> None:
    w = World(make())
    w.fire(T0)
    for later in (T0 + 10 * MINUTE, T0 + HOUR, T0 + 5 * HOUR):
        assert w.plan(later).fired == []
    assert w.st["pending"] is False
    assert w.st["iterations"] == 1


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
    assert w.st["next_due"] == first
    w.fire(first)
    return w, first


def test_cron_fire_due_during_a_run_is_queued_as_one_pending_fire() -> None:
    w, first = cron_world("queue")
    result = w.plan(first + 10 * MINUTE + 30)
    assert result.fired == [] and result.replace == []
    assert w.st["pending"] is True
    assert w.st["next_due"] == first + 20 * MINUTE
    # Another slot passes: still one pending fire, not two.
    w.plan(first + 20 * MINUTE + 30)
    assert w.st["pending"] is True
    assert w.st["iterations"] == 1


def test_cron_fire_due_during_a_run_is_dropped_with_skip() -> None:
    w, first = cron_world("skip")
    result = w.plan(first + 10 * MINUTE + 30)
    assert result.fired == [] and result.replace == []
    assert w.st["pending"] is False
    end = first + 12 * MINUTE
    w.finish(end)
    assert w.st["next_due"] == first + 20 * MINUTE  # the next slot, no catch-up


def test_cron_fire_due_during_a_run_replaces_it_with_replace() -> None:
    w, first = cron_world("replace")
    run = w.st["run"]
    result = w.plan(first + 10 * MINUTE + 30)
    assert result.fired == []
    assert result.replace == [("job", run)]
    assert w.st["pending"] is True


def test_settle_with_a_pending_fire_makes_it_due_at_once() -> None:
    w, first = cron_world("queue")
    w.plan(first + 10 * MINUTE + 30)
    end = first + 15 * MINUTE
    w.finish(end)
    assert w.st["next_due"] == end
    assert w.st["pending"] is False
    result = w.plan(end)
    assert fired_names(result) == ["job"]
    assert w.st["iterations"] == 2


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
    assert w.st["next_due"] == end
    assert fired_names(w.plan(end)) == ["job"]


def test_cron_slot_passed_unseen_during_a_run_is_dropped_with_skip() -> None:
    w, first = cron_world("skip")
    end = first + 25 * MINUTE
    w.finish(end)
    assert w.st["next_due"] == first + 30 * MINUTE


# -- lost runs and orphans ---------------------------------------------------------


def test_lost_run_is_recorded_and_cleared_and_the_schedule_goes_on() -> None:
    w = World(make())
    run = w.fire(T0)
    w.procs.live.clear()  # supervisor and agent both gone (reboot)
    now = T0 + 5 * MINUTE
    result = w.plan(now)
    assert result.lost == [("job", run)]
    assert result.fired == []
    assert w.st["run"] is None
    assert w.st["orphan"] is None
    assert w.st["last_outcome"] == "lost"
    assert w.st["status"] == "active"
    # A failure toward --max-failures (DESIGN §5), so the delay backs off x2.
    assert w.st["failures"] == 1
    assert w.st["next_due"] == now + 20 * MINUTE


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
    assert (w.st["status"], w.st["reason"], w.st["failures"]) == ("paused", "failure_limit", 3)
    assert w.plan(now).fired == []


def test_lost_run_with_a_live_agent_leaves_an_orphan_that_blocks_firing() -> None:
    w = World(make())
    w.fire(T0)
    w.procs.kill(SUPERVISOR)  # supervisor kill -9'd; its agent still runs
    result = w.plan(T0 + 60)
    assert [name for name, _ in result.lost] == ["job"]
    assert w.st["orphan"] == AGENT
    later = T0 + 60 + 20 * MINUTE  # due again (backed off: a lost run is a failure)
    blocked = w.plan(later)
    assert blocked.fired == []
    assert any("still alive" in why for _, why in blocked.skipped)
    w.procs.kill(AGENT)
    assert fired_names(w.plan(later + 1)) == ["job"]
    assert w.st["orphan"] is None


def test_pause_asked_during_a_run_that_is_then_lost_still_takes_effect() -> None:
    # DESIGN §4: pause during a run takes effect when the run settles; a lost
    # run is settled by the next driver, and must not forget the pause.
    w = World(make())
    w.fire(T0)
    lifecycle.pause(w.st, T0 + 1)
    w.procs.live.clear()
    w.plan(T0 + 60)
    assert (w.st["status"], w.st["reason"]) == ("paused", "user")
    assert w.plan(T0 + DAY - 1).fired == []


def test_stop_asked_during_a_run_that_is_then_lost_still_takes_effect() -> None:
    w = World(make())
    w.fire(T0)
    lifecycle.stop(w.st, T0 + 1)
    w.procs.live.clear()
    w.plan(T0 + 60)
    assert w.st["status"] == "stopped"
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
    assert w.st["run"] is not None


# -- expiry --------------------------------------------------------------------------


def test_not_expired_one_second_before_the_deadline() -> None:
    w = World(make(**{"for": "1h"}))
    lifecycle.pause(w.st, T0)
    w.plan(T0 + HOUR - 1)
    assert w.st["status"] == "paused"
    assert w.st["ended_at"] is None


def test_expired_exactly_at_the_deadline() -> None:
    w = World(make(**{"for": "1h"}))
    lifecycle.pause(w.st, T0)
    deadline = T0 + HOUR
    result = w.plan(deadline)
    assert result.changed
    assert w.st["status"] == "expired"
    assert w.st["ended_at"] == deadline
    assert w.st["observed_at"] == deadline
    assert w.st["next_due"] is None


def test_late_observed_expiry_keeps_the_real_deadline_and_when_it_was_seen() -> None:
    w = World(make(**{"for": "1h"}))
    w.cycle(T0, T0 + 60)
    deadline, seen = T0 + HOUR, T0 + 3 * DAY
    result = w.plan(seen)
    assert result.fired == []
    assert w.st["status"] == "expired"
    assert w.st["ended_at"] == deadline
    assert w.st["observed_at"] == seen


def test_run_settling_after_the_deadline_expires_the_loop() -> None:
    w = World(make(**{"for": "1h"}))
    w.fire(T0 + HOUR - 60)
    end = T0 + HOUR + 300
    w.finish(end, decision=decision("continue"))
    assert w.st["status"] == "expired"
    assert w.st["ended_at"] == T0 + HOUR
    assert w.st["observed_at"] == end
    assert w.st["next_due"] is None


# -- iteration limit --------------------------------------------------------------


def test_iteration_limit_pauses_after_the_last_allowed_run() -> None:
    w = World(make(max_runs=2))
    w.cycle(T0, T0 + 60)
    assert w.st["status"] == "active"
    w.cycle(T0 + 60 + 600, T0 + 60 + 660)
    assert (w.st["status"], w.st["reason"]) == ("paused", "iteration_limit")
    assert w.plan(T0 + DAY).fired == []


def test_complete_decision_on_the_last_allowed_run_wins() -> None:
    w = World(make(max_runs=2))
    w.cycle(T0, T0 + 60)
    w.cycle(T0 + 660, T0 + 700, decision=decision("complete"))
    assert w.st["status"] == "completed"
    assert w.st["reason"] is None
    assert w.st["ended_at"] == T0 + 700


def test_iteration_limit_is_also_checked_when_planning() -> None:
    w = World(make(max_runs=3))
    w.st["iterations"] = 3  # e.g. the limit was lowered by `update`
    result = w.plan(T0)
    assert result.fired == []
    assert (w.st["status"], w.st["reason"]) == ("paused", "iteration_limit")


def test_max_runs_zero_is_unlimited() -> None:
    w = World(make(max_runs=0, every="1s"))
    for i in range(60):
        w.cycle(T0 + 10 * i, T0 + 10 * i + 1)
    assert w.st["status"] == "active"
    assert w.st["iterations"] == 60


# -- failures ----------------------------------------------------------------------


def test_failure_limit_after_n_consecutive_failures() -> None:
    w = World(make(max_failures=3))
    now = T0
    for expected_status in ("active", "active", "paused"):
        w.fire(now)
        w.finish(now + 10, outcome="failed", started=now)
        assert w.st["status"] == expected_status
        now = w.st["next_due"] or now + DAY
    assert w.st["reason"] == "failure_limit"
    assert w.st["failures"] == 3


def test_success_resets_the_failure_count() -> None:
    w = World(make(max_failures=2))
    now = T0
    for outcome in ("failed", "ok", "failed", "ok", "failed"):
        w.fire(now)
        w.finish(now + 10, outcome=outcome, started=now)
        now = w.st["next_due"]
    assert w.st["status"] == "active"
    assert w.st["failures"] == 1


def test_timeout_counts_as_a_failure() -> None:
    w = World(make(max_failures=1))
    w.cycle(T0, T0 + 10, outcome="timeout")
    assert (w.st["status"], w.st["reason"]) == ("paused", "failure_limit")


def test_failed_runs_back_off_from_the_end_of_the_run() -> None:
    w = World(make(max_failures=10))
    end = T0 + 30
    w.cycle(T0, end, outcome="failed")
    assert w.st["next_due"] == end + 2 * 600
    w.cycle(end + 1200, end + 1230, outcome="failed")
    assert w.st["next_due"] == end + 1230 + 4 * 600


def test_fail_decision_ends_the_loop_and_block_pauses_it() -> None:
    w = World(make())
    w.cycle(T0, T0 + 10, decision=decision("fail"))
    assert w.st["status"] == "failed"
    w2 = World(make())
    w2.cycle(T0, T0 + 10, decision=decision("block"))
    assert (w2.st["status"], w2.st["reason"]) == ("paused", "blocked")


# -- pause / stop / resume ---------------------------------------------------------


def test_pause_during_a_run_takes_effect_at_settle_and_beats_continue() -> None:
    w = World(make())
    w.fire(T0)
    message = lifecycle.pause(w.st, T0 + 1)
    assert "when the current run ends" in message
    assert w.st["status"] == "active"
    w.finish(T0 + 60, decision=decision("continue"))
    assert (w.st["status"], w.st["reason"]) == ("paused", "user")
    assert w.plan(T0 + DAY - 1).fired == []


def test_stop_during_a_run_takes_effect_at_settle_and_beats_continue() -> None:
    w = World(make())
    w.fire(T0)
    lifecycle.stop(w.st, T0 + 1)
    assert w.st["status"] == "active"
    w.finish(T0 + 60, decision=decision("continue"))
    assert w.st["status"] == "stopped"
    assert w.st["next_due"] is None
    assert w.st["ended_at"] == T0 + 60


def test_pause_and_stop_when_idle_act_at_once() -> None:
    w = World(make())
    assert lifecycle.pause(w.st, T0) == "paused"
    assert (w.st["status"], w.st["reason"]) == ("paused", "user")
    assert w.plan(T0).fired == []
    assert lifecycle.stop(w.st, T0 + 5) == "stopped"
    assert w.st["status"] == "stopped"
    with pytest.raises(UsageError):
        lifecycle.pause(w.st, T0 + 6)
    with pytest.raises(UsageError):
        lifecycle.stop(w.st, T0 + 6)


def test_resume_after_pause_is_due_now() -> None:
    w = World(make())
    w.cycle(T0, T0 + 10)
    lifecycle.pause(w.st, T0 + 20)
    now = T0 + HOUR
    assert lifecycle.resume(w.loop, w.st, now, zone=zone_of(w.loop)) == "resumed"
    assert w.st["status"] == "active"
    assert w.st["next_due"] == now
    assert fired_names(w.plan(now)) == ["job"]


def test_resume_cancels_a_pending_pause() -> None:
    w = World(make())
    w.fire(T0)
    lifecycle.pause(w.st, T0 + 1)
    assert "cancelled" in lifecycle.resume(w.loop, w.st, T0 + 2, zone=zone_of(w.loop))
    w.finish(T0 + 60)
    assert w.st["status"] == "active"


def test_resume_after_the_deadline_is_refused_with_duration_limit() -> None:
    w = World(make(**{"for": "1h"}))
    lifecycle.pause(w.st, T0)
    with pytest.raises(UsageError) as info:
        lifecycle.resume(w.loop, w.st, T0 + HOUR, zone=zone_of(w.loop))
    assert info.value.message.startswith("duration_limit")
    assert info.value.code == 2
    assert w.st["status"] == "paused"


def test_resume_of_an_expired_loop_is_refused_until_for_is_raised() -> None:
    w = World(make(**{"for": "1h"}))
    w.plan(T0 + 2 * HOUR)
    assert w.st["status"] == "expired"
    with pytest.raises(UsageError, match="^duration_limit"):
        lifecycle.resume(w.loop, w.st, T0 + 2 * HOUR, zone=zone_of(w.loop))
    longer = make(**{"for": "1d"})
    lifecycle.reconcile({"job": longer}, {}, w.state, T0 + 2 * HOUR, zone_of)
    assert lifecycle.resume(longer, w.st, T0 + 2 * HOUR, zone=zone_of(longer)) == "resumed"
    assert w.st["status"] == "active"
    assert w.st["ended_at"] is None and w.st["observed_at"] is None


def test_resume_after_iteration_limit_is_refused_until_max_runs_raised() -> None:
    w = World(make(max_runs=1))
    w.cycle(T0, T0 + 10)
    assert w.st["reason"] == "iteration_limit"
    with pytest.raises(UsageError) as info:
        lifecycle.resume(w.loop, w.st, T0 + 20, zone=zone_of(w.loop))
    assert info.value.message.startswith("iteration_limit")
    raised = make(max_runs=3)
    assert lifecycle.resume(raised, w.st, T0 + 20, zone=zone_of(raised)) == "resumed"
    w.loop = raised
    # The schedule resumes where it was: 10m after the last run ended.
    assert w.plan(T0 + 10 + 599).fired == []
    assert fired_names(w.plan(T0 + 10 + 600)) == ["job"]
    assert w.st["iterations"] == 2


def test_resume_after_failure_limit_resets_the_failures() -> None:
    w = World(make(max_failures=1))
    w.cycle(T0, T0 + 10, outcome="failed")
    assert w.st["reason"] == "failure_limit"
    assert lifecycle.resume(w.loop, w.st, T0 + 20, zone=zone_of(w.loop)) == "resumed"
    assert (w.st["status"], w.st["reason"]) == ("active", None)
    assert w.st["failures"] == 0
    w.fire(w.st["next_due"])
    w.finish(w.st["run"]["claimed_at"] + 10, outcome="failed")
    assert w.st["status"] == "paused"  # one failure again reaches max_failures=1


def test_resume_of_a_completed_loop_is_refused() -> None:
    w = World(make())
    w.cycle(T0, T0 + 10, decision=decision("complete"))
    with pytest.raises(UsageError, match="completed"):
        lifecycle.resume(w.loop, w.st, T0 + 20, zone=zone_of(w.loop))


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
    assert w.st["next_due"] == due
    now = ts("2026-01-01T06:30:00Z")
    result = w.plan(now)
    assert fired_names(result) == ["job"]
    assert result.fired[0][1]["missed"] == 5  # 02:00 .. 06:00
    w.finish(now + 60)
    assert w.st["next_due"] == ts("2026-01-01T07:00:00Z")


def test_catch_up_none_skips_a_long_missed_fire() -> None:
    w = World(make(every="1h", catch_up="none"))
    w.cycle(T0, T0 + 60)
    now = T0 + 60 + HOUR + 10 * HOUR
    result = w.plan(now)
    assert result.fired == []
    assert ("job", "missed (catch-up none)") in result.skipped
    assert w.st["next_due"] == now + HOUR
    assert w.st["iterations"] == 1


def test_catch_up_none_still_fires_a_slightly_late_tick() -> None:
    w = World(make(every="1h", catch_up="none"))
    w.cycle(T0, T0 + 60)
    assert fired_names(w.plan(T0 + 60 + HOUR + 30)) == ["job"]


def test_cron_catch_up_none_waits_for_the_next_slot() -> None:
    w = World(make(cron="0 * * * *", tz="UTC", catch_up="none"))
    now = ts("2026-01-01T06:30:00Z")
    assert w.plan(now).fired == []
    assert w.st["next_due"] == ts("2026-01-01T07:00:00Z")


# -- clock set back --------------------------------------------------------------


def test_clock_set_back_rearms_an_every_loop_from_now() -> None:
    w = World(make())
    w.cycle(T0, T0 + 60)
    w.st["next_due"] = T0 + 365 * DAY  # computed while the clock was a year ahead
    now = T0 + 120
    result = w.plan(now)
    assert result.changed
    assert result.fired == []  # as if the last run ended now: no duplicate run
    assert w.st["next_due"] == now + 600  # and no stall beyond one interval
    assert "clock" in (w.st["note"] or "")


def test_clock_set_back_rearms_a_cron_loop_at_its_next_slot() -> None:
    w = World(make(cron="0 * * * *", tz="UTC"))
    w.st["next_due"] = T0 + 365 * DAY
    result = w.plan(T0)
    assert result.fired == []
    assert w.st["next_due"] == cron_next("0 * * * *", ZoneInfo("UTC"), T0)


def test_cron_after_is_not_mistaken_for_a_clock_change() -> None:
    # `--after 1d` on a cron loop: the first slot is a day out, which is
    # correct, not a sign that the clock went back (DESIGN §3 --after).
    w = World(make(cron="*/10 * * * *", tz="UTC", after="1d"))
    first = ts("2026-01-02T00:10:00Z")
    assert w.st["next_due"] == first
    assert w.plan(T0).fired == []
    assert w.plan(ts("2026-01-01T00:10:00Z")).fired == []
    assert w.st["next_due"] == first
    assert fired_names(w.plan(first)) == ["job"]


def test_legitimate_backoff_is_not_mistaken_for_a_clock_change() -> None:
    w = World(make(max_failures=10))
    now = T0
    for _ in range(4):
        w.fire(now)
        w.finish(now + 1, outcome="failed", started=now)
        now = w.st["next_due"]
    end = w.st["last_end"]
    assert w.st["next_due"] == end + 8 * 600
    w.plan(end + 1)
    assert w.st["next_due"] == end + 8 * 600
    assert w.st["note"] is None


# -- auto pace ---------------------------------------------------------------------


@pytest.mark.parametrize(("asked", "used", "clamped"),
                         [(10, 60, True), (600, 600, False), (7200, 3600, True)])
def test_auto_requested_delay_is_clamped_and_the_clamp_noted(
        asked: float, used: float, clamped: bool) -> None:
    w = World(make(every="auto"))
    end = T0 + 30
    extra = w.cycle(T0, end, decision=decision("continue", asked))
    assert extra["next_delay_s"] == used
    assert w.st["next_due"] == end + used
    if clamped:
        assert "clamped" in extra.get("note", "")
    else:
        assert "note" not in extra


def test_auto_two_omitted_decisions_pause_keepalive_exhausted() -> None:
    w = World(make(every="auto", keepalive="20m"))
    end = T0 + 30
    extra = w.cycle(T0, end)
    assert "keepalive" in extra["note"]
    assert w.st["status"] == "active"
    assert w.st["next_due"] == end + 20 * MINUTE
    w.cycle(end + 20 * MINUTE, end + 21 * MINUTE)
    assert (w.st["status"], w.st["reason"]) == ("paused", "keepalive_exhausted")


def test_auto_a_decision_between_omissions_restores_the_keepalive_credit() -> None:
    w = World(make(every="auto"))
    now = T0
    for dec in (None, decision("continue", 300), None):
        w.cycle(now, now + 10, decision=dec)
        now = w.st["next_due"]
    assert w.st["status"] == "active"


def test_next_is_ignored_and_noted_on_a_fixed_schedule() -> None:
    w = World(make(every="10m"))
    end = T0 + 30
    extra = w.cycle(T0, end, decision=decision("continue", 5))
    assert "ignored" in extra["note"]
    assert w.st["next_due"] == end + 600


def test_until_text_in_the_final_result_completes_the_loop() -> None:
    w = World(make(until="ALL GREEN"))
    w.cycle(T0, T0 + 10, result_text="checked: ALL GREEN today")
    assert w.st["status"] == "completed"


# -- valves directly -------------------------------------------------------------


def test_valves_observe_is_a_no_op_for_terminal_loops() -> None:
    loop = make(**{"for": "1h"})
    st = new_loop_state(loop, T0, zone=zone_of(loop))
    st["status"] = "completed"
    assert valves.observe(loop, st, T0 + DAY) is False
    assert st["status"] == "completed"


def test_valves_resume_refusal_none_for_a_user_pause_in_time() -> None:
    loop = make()
    st = new_loop_state(loop, T0, zone=zone_of(loop))
    st["status"], st["reason"] = "paused", "user"
    assert valves.resume_refusal(loop, st, T0 + 1) is None


def test_a_cron_loop_keeps_the_zone_it_is_given_through_every_transition() -> None:
    """The zone comes in from the edge (`clock.zone_of` in the drivers): a loop
    without `--tz` on a machine in Tokyo is armed, claimed, coalesced while
    in flight, settled, lost and resumed at 09:00 Tokyo, never 09:00 UTC."""
    tokyo = ZoneInfo("Asia/Tokyo")
    w = World(make(cron="0 9 * * *", overlap="skip"), zones=lambda loop: tokyo)

    def at_nine_in_tokyo(when: float) -> bool:
        local = datetime.fromtimestamp(when, tokyo)
        return (local.hour, local.minute, local.second) == (9, 0, 0)

    first = w.st["next_due"]
    assert at_nine_in_tokyo(first)                      # new_loop_state
    w.fire(first)
    assert w.st["next_due"] == first + DAY              # claim
    w.plan(first + DAY + 1)
    assert w.st["next_due"] == first + 2 * DAY          # a slot passed in flight
    w.finish(first + DAY + 2)
    assert w.st["next_due"] == first + 2 * DAY          # settle keeps the tracked slot
    w.fire(first + 2 * DAY)
    w.procs.live.clear()
    w.plan(first + 3 * DAY + 5)                         # the run is lost
    assert w.st["next_due"] == first + 4 * DAY
    lifecycle.pause(w.st, first + 3 * DAY + 6)
    lifecycle.resume(w.loop, w.st, first + 5 * DAY, zone=tokyo)
    assert w.st["next_due"] == first + 6 * DAY          # resume re-arms in the zone
