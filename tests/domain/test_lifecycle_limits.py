"""What ends, pauses or resumes a loop (DESIGN §4, §5, §7): expiry at the
`--for` deadline, the iteration limit (`--max-runs`), consecutive failures and
their back-off, `fail`/`block`/`complete` decisions, pause/stop/resume (and
when resume is refused), auto pace (clamped delays, the keepalive, `next` on a
fixed schedule, `--until`) and the valves module directly. Driven with a fake
clock and a fake process table (lifecycle_support.py), never a real process.
"""

from __future__ import annotations

import pytest
from fixed_zone import zone_of
from lifecycle_support import DAY, HOUR, MINUTE, T0, World, decision, fired_names, make

from loopctl.domain import lifecycle, valves, verbs
from loopctl.domain.errors import UsageError
from loopctl.domain.state import new_loop_state

# -- expiry --------------------------------------------------------------------------


def test_not_expired_one_second_before_the_deadline() -> None:
    w = World(make(**{"for": "1h"}))
    w.st.pause(T0)
    w.plan(T0 + HOUR - 1)
    assert w.st.status == "paused"
    assert w.st.ended_at is None


def test_expired_exactly_at_the_deadline() -> None:
    w = World(make(**{"for": "1h"}))
    w.st.pause(T0)
    deadline = T0 + HOUR
    result = w.plan(deadline)
    assert result.changed
    assert w.st.status == "expired"
    assert w.st.ended_at == deadline
    assert w.st.observed_at == deadline
    assert w.st.next_due is None


def test_late_observed_expiry_keeps_the_real_deadline_and_when_it_was_seen() -> None:
    w = World(make(**{"for": "1h"}))
    w.cycle(T0, T0 + 60)
    deadline, seen = T0 + HOUR, T0 + 3 * DAY
    result = w.plan(seen)
    assert result.fired == []
    assert w.st.status == "expired"
    assert w.st.ended_at == deadline
    assert w.st.observed_at == seen


def test_run_settling_after_the_deadline_expires_the_loop() -> None:
    w = World(make(**{"for": "1h"}))
    w.fire(T0 + HOUR - 60)
    end = T0 + HOUR + 300
    w.finish(end, decision=decision("continue"))
    assert w.st.status == "expired"
    assert w.st.ended_at == T0 + HOUR
    assert w.st.observed_at == end
    assert w.st.next_due is None


# -- iteration limit --------------------------------------------------------------


def test_iteration_limit_pauses_after_the_last_allowed_run() -> None:
    w = World(make(max_runs=2))
    w.cycle(T0, T0 + 60)
    assert w.st.status == "active"
    w.cycle(T0 + 60 + 600, T0 + 60 + 660)
    assert (w.st.status, w.st.reason) == ("paused", "iteration_limit")
    assert w.plan(T0 + DAY).fired == []


def test_complete_decision_on_the_last_allowed_run_wins() -> None:
    w = World(make(max_runs=2))
    w.cycle(T0, T0 + 60)
    w.cycle(T0 + 660, T0 + 700, decision=decision("complete"))
    assert w.st.status == "completed"
    assert w.st.reason is None
    assert w.st.ended_at == T0 + 700


def test_iteration_limit_is_also_checked_when_planning() -> None:
    w = World(make(max_runs=3))
    w.st.iterations = 3  # e.g. the limit was lowered by `update`
    result = w.plan(T0)
    assert result.fired == []
    assert (w.st.status, w.st.reason) == ("paused", "iteration_limit")


def test_max_runs_zero_is_unlimited() -> None:
    w = World(make(max_runs=0, every="1s"))
    for i in range(60):
        w.cycle(T0 + 10 * i, T0 + 10 * i + 1)
    assert w.st.status == "active"
    assert w.st.iterations == 60


# -- failures ----------------------------------------------------------------------


def test_failure_limit_after_n_consecutive_failures() -> None:
    w = World(make(max_failures=3))
    now = T0
    for expected_status in ("active", "active", "paused"):
        w.fire(now)
        w.finish(now + 10, outcome="failed", started=now)
        assert w.st.status == expected_status
        now = w.st.next_due or now + DAY
    assert w.st.reason == "failure_limit"
    assert w.st.failures == 3


def test_success_resets_the_failure_count() -> None:
    w = World(make(max_failures=2))
    now = T0
    for outcome in ("failed", "ok", "failed", "ok", "failed"):
        w.fire(now)
        w.finish(now + 10, outcome=outcome, started=now)
        now = w.st.next_due
    assert w.st.status == "active"
    assert w.st.failures == 1


def test_timeout_counts_as_a_failure() -> None:
    w = World(make(max_failures=1))
    w.cycle(T0, T0 + 10, outcome="timeout")
    assert (w.st.status, w.st.reason) == ("paused", "failure_limit")


def test_failed_runs_back_off_from_the_end_of_the_run() -> None:
    w = World(make(max_failures=10))
    end = T0 + 30
    w.cycle(T0, end, outcome="failed")
    assert w.st.next_due == end + 2 * 600
    w.cycle(end + 1200, end + 1230, outcome="failed")
    assert w.st.next_due == end + 1230 + 4 * 600


def test_fail_decision_ends_the_loop_and_block_pauses_it() -> None:
    w = World(make())
    w.cycle(T0, T0 + 10, decision=decision("fail"))
    assert w.st.status == "failed"
    w2 = World(make())
    w2.cycle(T0, T0 + 10, decision=decision("block"))
    assert (w2.st.status, w2.st.reason) == ("paused", "blocked")


# -- pause / stop / resume ---------------------------------------------------------


def test_pause_during_a_run_takes_effect_at_settle_and_beats_continue() -> None:
    w = World(make())
    w.fire(T0)
    message = w.st.pause(T0 + 1)
    assert "when the current run ends" in message
    assert w.st.status == "active"
    w.finish(T0 + 60, decision=decision("continue"))
    assert (w.st.status, w.st.reason) == ("paused", "user")
    assert w.plan(T0 + DAY - 1).fired == []


def test_stop_during_a_run_takes_effect_at_settle_and_beats_continue() -> None:
    w = World(make())
    w.fire(T0)
    w.st.stop(T0 + 1)
    assert w.st.status == "active"
    w.finish(T0 + 60, decision=decision("continue"))
    assert w.st.status == "stopped"
    assert w.st.next_due is None
    assert w.st.ended_at == T0 + 60


def test_pause_and_stop_when_idle_act_at_once() -> None:
    w = World(make())
    assert w.st.pause(T0) == "paused"
    assert (w.st.status, w.st.reason) == ("paused", "user")
    assert w.plan(T0).fired == []
    assert w.st.stop(T0 + 5) == "stopped"
    assert w.st.status == "stopped"
    with pytest.raises(UsageError):
        w.st.pause(T0 + 6)
    with pytest.raises(UsageError):
        w.st.stop(T0 + 6)


def test_resume_after_pause_is_due_now() -> None:
    w = World(make())
    w.cycle(T0, T0 + 10)
    w.st.pause(T0 + 20)
    now = T0 + HOUR
    assert verbs.resume(w.loop, w.st, now, zone=zone_of(w.loop)) == "resumed"
    assert w.st.status == "active"
    assert w.st.next_due == now
    assert fired_names(w.plan(now)) == ["job"]


def test_resume_cancels_a_pending_pause() -> None:
    w = World(make())
    w.fire(T0)
    w.st.pause(T0 + 1)
    assert "cancelled" in verbs.resume(w.loop, w.st, T0 + 2, zone=zone_of(w.loop))
    w.finish(T0 + 60)
    assert w.st.status == "active"


def test_resume_after_the_deadline_is_refused_with_duration_limit() -> None:
    w = World(make(**{"for": "1h"}))
    w.st.pause(T0)
    with pytest.raises(UsageError) as info:
        verbs.resume(w.loop, w.st, T0 + HOUR, zone=zone_of(w.loop))
    assert info.value.message.startswith("duration_limit")
    assert info.value.code == 2
    assert w.st.status == "paused"


def test_resume_of_an_expired_loop_is_refused_until_for_is_raised() -> None:
    w = World(make(**{"for": "1h"}))
    w.plan(T0 + 2 * HOUR)
    assert w.st.status == "expired"
    with pytest.raises(UsageError, match="^duration_limit"):
        verbs.resume(w.loop, w.st, T0 + 2 * HOUR, zone=zone_of(w.loop))
    longer = make(**{"for": "1d"})
    lifecycle.reconcile({"job": longer}, {}, w.state, T0 + 2 * HOUR, zone_of)
    assert verbs.resume(longer, w.st, T0 + 2 * HOUR, zone=zone_of(longer)) == "resumed"
    assert w.st.status == "active"
    assert w.st.ended_at is None and w.st.observed_at is None


def test_resume_after_iteration_limit_is_refused_until_max_runs_raised() -> None:
    w = World(make(max_runs=1))
    w.cycle(T0, T0 + 10)
    assert w.st.reason == "iteration_limit"
    with pytest.raises(UsageError) as info:
        verbs.resume(w.loop, w.st, T0 + 20, zone=zone_of(w.loop))
    assert info.value.message.startswith("iteration_limit")
    raised = make(max_runs=3)
    assert verbs.resume(raised, w.st, T0 + 20, zone=zone_of(raised)) == "resumed"
    w.loop = raised
    # The schedule resumes where it was: 10m after the last run ended.
    assert w.plan(T0 + 10 + 599).fired == []
    assert fired_names(w.plan(T0 + 10 + 600)) == ["job"]
    assert w.st.iterations == 2


def test_resume_after_failure_limit_resets_the_failures() -> None:
    w = World(make(max_failures=1))
    w.cycle(T0, T0 + 10, outcome="failed")
    assert w.st.reason == "failure_limit"
    assert verbs.resume(w.loop, w.st, T0 + 20, zone=zone_of(w.loop)) == "resumed"
    assert (w.st.status, w.st.reason) == ("active", None)
    assert w.st.failures == 0
    w.fire(w.st.next_due)
    w.finish(w.st.run["claimed_at"] + 10, outcome="failed")
    assert w.st.status == "paused"  # one failure again reaches max_failures=1


def test_resume_of_a_completed_loop_is_refused() -> None:
    w = World(make())
    w.cycle(T0, T0 + 10, decision=decision("complete"))
    with pytest.raises(UsageError, match="completed"):
        verbs.resume(w.loop, w.st, T0 + 20, zone=zone_of(w.loop))


# -- auto pace ---------------------------------------------------------------------


@pytest.mark.parametrize(("asked", "used", "clamped"),
                         [(10, 60, True), (600, 600, False), (7200, 3600, True)])
def test_auto_requested_delay_is_clamped_and_the_clamp_noted(
        asked: float, used: float, clamped: bool) -> None:
    w = World(make(every="auto"))
    end = T0 + 30
    extra = w.cycle(T0, end, decision=decision("continue", asked))
    assert extra.next_delay_s == used
    assert w.st.next_due == end + used
    if clamped:
        assert "clamped" in (extra.note or "")
    else:
        assert extra.note is None


def test_auto_two_omitted_decisions_pause_keepalive_exhausted() -> None:
    w = World(make(every="auto", keepalive="20m"))
    end = T0 + 30
    extra = w.cycle(T0, end)
    assert "keepalive" in (extra.note or "")
    assert w.st.status == "active"
    assert w.st.next_due == end + 20 * MINUTE
    w.cycle(end + 20 * MINUTE, end + 21 * MINUTE)
    assert (w.st.status, w.st.reason) == ("paused", "keepalive_exhausted")


def test_auto_a_decision_between_omissions_restores_the_keepalive_credit() -> None:
    w = World(make(every="auto"))
    now = T0
    for dec in (None, decision("continue", 300), None):
        w.cycle(now, now + 10, decision=dec)
        now = w.st.next_due
    assert w.st.status == "active"


def test_next_is_ignored_and_noted_on_a_fixed_schedule() -> None:
    w = World(make(every="10m"))
    end = T0 + 30
    extra = w.cycle(T0, end, decision=decision("continue", 5))
    assert "ignored" in (extra.note or "")
    assert w.st.next_due == end + 600


def test_until_text_in_the_final_result_completes_the_loop() -> None:
    w = World(make(until="ALL GREEN"))
    w.cycle(T0, T0 + 10, result_text="checked: ALL GREEN today")
    assert w.st.status == "completed"


# -- valves directly -------------------------------------------------------------


def test_valves_observe_is_a_no_op_for_terminal_loops() -> None:
    loop = make(**{"for": "1h"})
    st = new_loop_state(loop, T0, zone=zone_of(loop))
    st.status = "completed"
    assert valves.observe(loop, st, T0 + DAY) is False
    assert st.status == "completed"


def test_valves_resume_refusal_none_for_a_user_pause_in_time() -> None:
    loop = make()
    st = new_loop_state(loop, T0, zone=zone_of(loop))
    st.status, st.reason = "paused", "user"
    assert valves.resume_refusal(loop, st, T0 + 1) is None
