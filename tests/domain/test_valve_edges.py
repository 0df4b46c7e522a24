"""Safety valves at their edges (DESIGN §4, §7), driven through the lifecycle
with a fake clock and a fake process table: rate-limit back-off when the agent
names no reset time, the budget noticed by a driver pass, the run limit
noticed when a fire is refused, and the no-progress digests."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fixed_zone import zone_of

from loopctl.domain import lifecycle, valves, verbs
from loopctl.domain.model import LoopDef, parse_loop
from loopctl.domain.state import LoopState, RunResult

MINUTE = 60
T0 = datetime.fromisoformat("2026-03-02T10:00:00+00:00").timestamp()
SUPERVISOR = {"pid": 5101, "ct": 1.0}


def make(**raw: Any) -> LoopDef:
    raw.setdefault("prompt", "p")
    raw.setdefault("every", "10m")
    return parse_loop("job", raw)


class World:
    def __init__(self, loop: LoopDef) -> None:
        self.loop = loop
        self.state: dict[str, Any] = {"loops": {}}
        self.live: set[int] = set()
        lifecycle.reconcile({"job": loop}, {}, self.state, T0, zone_of)

    @property
    def st(self) -> LoopState:
        return self.state["loops"]["job"]

    def alive(self, ref: dict[str, Any] | None) -> bool:
        return ref is not None and ref["pid"] in self.live

    def plan(self, now: float) -> lifecycle.Pass:
        return lifecycle.plan({"job": self.loop}, {}, self.state, now, self.alive, zones=zone_of)

    def run(self, now: float, outcome: str = "ok", **kw: Any) -> None:
        result = self.plan(now)
        assert [name for name, _ in result.fired] == ["job"], result
        result.fired[0][1]["supervisor"] = dict(SUPERVISOR)
        lifecycle.settle(self.loop, self.st, RunResult(outcome, 0, now, now + 1, **kw), now + 1,
                         zone=zone_of(self.loop))


def test_a_rate_limit_without_a_reset_time_backs_off_doubling_to_an_hour() -> None:
    w = World(make(max_runs=0))
    now, waits = T0, []
    for _ in range(6):
        w.run(now, "deferred")
        assert (w.st.status, w.st.reason) == ("paused", "rate_limited")
        waits.append(w.st.resume_at - (now + 1))
        assert w.plan(w.st.resume_at - 1).deferred == [("job", w.st.resume_at)]
        now = w.st.resume_at
    assert waits == [5 * MINUTE, 10 * MINUTE, 20 * MINUTE, 40 * MINUTE, 60 * MINUTE, 60 * MINUTE]
    assert w.st.iterations == 0  # deferred runs did no work
    # The next pass after the last deferral ends it; a run that gets through
    # resets the back-off.
    w.run(now)
    assert (w.st.status, w.st.deferrals) == ("active", 0)


def test_a_reset_time_already_past_backs_off_and_a_future_one_is_kept() -> None:
    st = World(make()).st
    assert valves.rate_limit_resume_at(st, T0 - 5, T0) == T0 + 5 * MINUTE
    assert valves.rate_limit_resume_at(st, T0 + 90, T0) == T0 + 90
    assert st.deferrals == 2


def test_a_driver_pass_pauses_an_active_loop_once_the_budget_is_spent() -> None:
    w = World(make(budget_usd=1.0))
    w.run(T0, cost_usd=0.6)
    assert w.st.status == "active"
    # Spent on a run settled by another path (its record was late): the next
    # pass notices before firing again.
    w.st.cost_usd = 1.2
    result = w.plan(T0 + 20 * MINUTE)
    assert result.changed and result.fired == []
    assert (w.st.status, w.st.reason) == ("paused", "budget_limit")
    assert ("job", "paused: budget_limit") in result.skipped
    assert valves.fire_refusal(w.loop, w.st) == \
        "paused (budget_limit): $1.20 of $1.00 spent; raise it with " \
        "`loopctl update job --budget-usd X`"


def test_a_loop_found_at_its_run_limit_is_paused_when_a_fire_is_refused() -> None:
    w = World(make(max_runs=1))
    w.run(T0)
    assert (w.st.status, w.st.reason) == ("paused", "iteration_limit")
    w.st.status, w.st.reason = "active", None  # e.g. an older loopctl's state
    assert valves.fire_refusal(w.loop, w.st) == \
        "paused (iteration_limit): 1/1 runs used; raise it with " \
        "`loopctl update job --max-runs N`, then resume"
    assert (w.st.status, w.st.reason) == ("paused", "iteration_limit")


def test_fire_refusal_names_the_fix_for_each_reason() -> None:
    loop = make()
    st = World(loop).st
    assert valves.fire_refusal(loop, st) is None
    for reason, fix in [("user", "`loopctl resume job` first"),
                        ("blocked", "`loopctl resume job` when ready"),
                        ("rate_limited", "rate-limited until a backoff; it resumes by itself")]:
        st.status, st.reason = "paused", reason
        assert valves.fire_refusal(loop, st) == f"paused ({reason}): {fix}"
    st.status = "completed"
    assert valves.fire_refusal(loop, st) == (
        "completed; remove it with `loopctl rm job` and start it again, or start a new loop "
        "under another --name")


def test_an_empty_result_clears_the_no_progress_digests() -> None:
    loop = make(no_progress=2)
    st = World(loop).st
    valves.record_result(loop, st, "built 3 files at 2026-03-02T10:00:00Z")
    valves.record_result(loop, st, "built 3 files at 2026-03-02T11:15:09Z")
    assert len(st.results) == 2 and valves.no_progress_reached(loop, st)
    valves.record_result(loop, st, "   \n")
    assert st.results == [] and not valves.no_progress_reached(loop, st)
    valves.record_result(loop, st, None)
    assert st.results == []


def test_resume_of_an_active_loop_changes_nothing() -> None:
    w = World(make())
    before = dict(vars(w.st))
    assert verbs.resume(w.loop, w.st, T0 + 5, zone=zone_of(w.loop)) == "already active"
    assert vars(w.st) == before
