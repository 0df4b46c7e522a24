"""Slots (DESIGN §20): every fire serves one, a served slot never fires
again. A table over overlap policy × catch-up × a run in flight × when the
driver looks (on the slot, late inside the grace, late past it, after the
clock stepped back), asserting what fires, what is skipped and why, and the
next due time, as Kubernetes' TestControllerV2SyncCronJob does; then the
slot arithmetic `run --scheduled` uses. Fake clock, fake process table.
"""

from __future__ import annotations

from typing import Any

import pytest
from fixed_zone import UTC
from lifecycle_support import HOUR, MINUTE, SUPERVISOR, T0, World, fired_names, make, ts

from loopctl.domain import lifecycle, slots
from loopctl.domain.state import repair

# An hourly cron loop made at T0 (00:03): its slots are on the hour.
S = ts("2026-01-01T01:00:00Z")  # its first slot
PREVIOUS = S - HOUR


def world(overlap: str, catch_up: str) -> World:
    """`catch_up`: one, none, or `window` (one, within a 20m window)."""
    if catch_up == "window":
        return World(make(cron="0 * * * *", overlap=overlap, catch_up_window="20m"))
    return World(make(cron="0 * * * *", overlap=overlap, catch_up=catch_up))


def in_flight(w: World) -> dict[str, Any]:
    """A run of the slot before S, still going when S comes due."""
    w.st.next_due = PREVIOUS
    run = w.fire(PREVIOUS)
    assert run["slot"] == slots.label(PREVIOUS)
    return run


# (when the driver looks, catch-up) -> what it does with the due slot S
LATE_INSIDE, LATE_PAST = S + MINUTE, S + 3 * HOUR
IDLE_ROWS = [
    # now, catch_up, fires the slot (None: skipped), skip words, next due
    (S, "one", S, None, S + HOUR),
    (S, "none", S, None, S + HOUR),
    (LATE_INSIDE, "one", S, None, S + HOUR),
    (LATE_INSIDE, "none", S, None, S + HOUR),
    # one catch-up for the missed slots, serving the latest of them
    (LATE_PAST, "one", S + 3 * HOUR, None, S + 4 * HOUR),
    (LATE_PAST, "none", None, "missed (catch-up none)", S + 4 * HOUR),
    (S, "window", S, None, S + HOUR),
    (S + 10 * MINUTE, "window", S, None, S + HOUR),
    # its latest missed slot (S + 3h) is 40 minutes old when first seen
    (S + 3 * HOUR + 40 * MINUTE, "window", None,
     "slot 2026-01-01T04:00:00Z skipped: outside the catch-up window (20m late at most)",
     S + 4 * HOUR),
]


@pytest.mark.parametrize("driver", ["tick", "daemon"])
@pytest.mark.parametrize("overlap", ["queue", "skip", "replace"])
@pytest.mark.parametrize(("now", "catch_up", "serves", "skip", "next_due"), IDLE_ROWS)
def test_an_idle_loop_serves_the_due_slot_or_says_why(driver: str, overlap: str, now: float,
                                                      catch_up: str, serves: float | None,
                                                      skip: str | None,
                                                      next_due: float) -> None:
    """`tick` and the daemon both decide through one pass (lifecycle.plan);
    the overlap policy does not matter with nothing in flight."""
    w = world(overlap, catch_up)
    result = w.plan(now)
    reasons = [e.reason for _, e in result.slot_skips]
    if serves is None:
        assert fired_names(result) == [] and (w.loop.name, skip) in result.skipped
        assert reasons == ["catch_up_none" if catch_up == "none" else "outside_window"]
    else:
        ((_, run),) = result.fired
        assert run["slot"] == slots.label(serves) and run["due_at"] == serves
        assert w.st.slots["high"] == serves
    assert w.st.next_due == next_due


@pytest.mark.parametrize("driver", ["tick", "daemon"])
@pytest.mark.parametrize(("overlap", "pending"),
                         [("queue", True), ("skip", False), ("replace", True)])
@pytest.mark.parametrize("now", [S, LATE_INSIDE, LATE_PAST])
def test_a_slot_due_during_a_run_is_coalesced_never_fired_beside_it(
        driver: str, overlap: str, pending: bool, now: float) -> None:
    w = world(overlap, "one")
    run = in_flight(w)
    result = w.plan(now)
    assert fired_names(result) == []
    assert (w.loop.name, f"running ({run['run_id']})") in result.skipped
    assert w.st.pending is pending
    # A slot skipped beside the run is on record; a queued one runs later.
    assert [e.reason for _, e in result.slot_skips] == \
        (["overlap_skip"] if overlap == "skip" else [])
    assert bool(result.replace) is (overlap == "replace")
    assert w.st.next_due == slots.cron_latest("0 * * * *", UTC, now) + HOUR


@pytest.mark.parametrize("overlap", ["queue", "skip", "replace"])
@pytest.mark.parametrize("catch_up", ["one", "none"])
def test_a_served_slot_never_fires_again_after_the_clock_steps_back(overlap: str,
                                                                    catch_up: str) -> None:
    w = world(overlap, catch_up)
    run = w.fire(S)
    w.finish(S + 5 * MINUTE)
    assert w.st.next_due == S + HOUR
    # The clock goes back 40 minutes: the loop re-arms from "now" (S again)...
    back = S - 40 * MINUTE
    assert fired_names(w.plan(back)) == [] and w.st.next_due == S
    # ...and when the clock reaches S a second time, S is not served again.
    result = w.plan(S)
    assert fired_names(result) == []
    why = f"slot {slots.label(S)[9:]} already ran: run {run['run_id']}"
    assert (w.loop.name, why) in result.skipped and w.st.note == why
    assert w.st.next_due == S + HOUR
    # The next slot still fires, once.
    assert [r["slot"] for _, r in w.plan(S + HOUR).fired] == [slots.label(S + HOUR)]


def test_an_interval_loop_serves_its_due_time_and_never_twice() -> None:
    w = World(make(every="10m"))
    run = w.fire(T0)
    assert run["slot"] == slots.label(T0) and run["due_at"] == T0
    w.finish(T0 + MINUTE)
    w.st.next_due = T0  # as if a clock step had re-armed it onto the served slot
    result = w.plan(T0 + 2 * MINUTE)
    assert fired_names(result) == []
    assert w.st.note == f"slot {slots.label(T0)[9:]} already ran: run {run['run_id']}"


def test_manual_and_triggered_fires_serve_their_own_slots() -> None:
    w = World(make(every="10m"))
    lifecycle.claim(w.loop, w.st, T0 + 5, "manual", zone=UTC)
    manual = w.st.run
    assert manual["slot"] == f"manual:{manual['run_id']}" and manual["due_at"] == T0 + 5
    assert w.st.slots is None  # a manual fire takes no schedule slot
    w.st.run = None
    w.st.triggered = {"count": 2, "at": T0 + 7}
    lifecycle.claim(w.loop, w.st, T0 + 9, "schedule", zone=UTC)
    fired = w.st.run
    assert fired["slot"] == f"trigger:{slots.label(T0 + 7)[9:]}" and fired["trigger"] == "api"


def test_a_run_that_could_not_launch_gives_its_slot_back() -> None:
    w = world("queue", "one")
    ((_, run),) = w.plan(S).fired
    w.st.unclaim("cannot write its log")
    assert w.st.slots is None and slots.served(w.st, S) is None
    assert run["slot"] == slots.label(S)


# -- the slot `run --scheduled` serves ---------------------------------------------


def test_latest_is_the_schedule_instant_at_or_before_now() -> None:
    hourly, created = make(cron="0 * * * *"), T0
    assert slots.latest(hourly, created, S, UTC) == S
    assert slots.latest(hourly, created, S + 59 * MINUTE, UTC) == S
    yearly = make(cron="0 0 1 1 *")
    assert slots.latest(yearly, ts("2025-06-01T00:00:00Z"), ts("2026-12-31T23:59:00Z"),
                        UTC) == ts("2026-01-01T00:00:00Z")
    # Its instants before the loop started are not its slots.
    assert slots.latest(yearly, created, ts("2026-12-31T23:59:00Z"), UTC) is None
    every = make(every="10m")
    assert slots.latest(every, created, created + 25 * MINUTE, UTC) == created + 20 * MINUTE
    assert slots.latest(every, created, created - 1, UTC) is None
    assert slots.latest(make(every="auto"), created, S, UTC) is None


def test_is_instant_accepts_only_the_schedules_own_instants() -> None:
    hourly, every = make(cron="0 * * * *"), make(every="10m")
    assert slots.is_instant(hourly, T0, S, UTC)
    assert not slots.is_instant(hourly, T0, S + 1, UTC)
    assert slots.is_instant(every, T0, T0 + 30 * MINUTE, UTC)
    assert not slots.is_instant(every, T0, T0 + 30 * MINUTE + 1, UTC)
    assert not slots.is_instant(every, T0, T0 - 10 * MINUTE, UTC)


def test_slot_memory_is_bounded_and_remembers_the_newest() -> None:
    from loopctl.domain.state import LoopState

    st = LoopState({"slots": None})
    for n in range(3 * slots.KEEP):
        slots.remember(st, T0 + n * HOUR, f"run {n}")
    assert st.slots is not None and len(st.slots["recent"]) == slots.KEEP
    assert st.slots["high"] == T0 + (3 * slots.KEEP - 1) * HOUR
    assert slots.served(st, T0 + (3 * slots.KEEP - 1) * HOUR) == f"run {3 * slots.KEEP - 1}"
    assert slots.served(st, T0 + 3 * slots.KEEP * HOUR) is None
    # An --every window is taken by any fire inside it.
    assert slots.served(st, T0 + (3 * slots.KEEP - 1) * HOUR - 5, 10) is not None
    assert slots.served(st, T0 + (3 * slots.KEEP - 1) * HOUR + 1, 10) is None


@pytest.mark.parametrize("bad", [
    "x", [], {"high": float("nan"), "recent": []}, {"high": 1.0, "recent": [[1.0, 2]]},
    {"high": 1.0, "recent": [[1.0, "run x"]] * (slots.KEEP + 1)},
    {"high": 1e300, "recent": []},
])
def test_a_damaged_slots_entry_is_repaired_and_the_loop_paused(bad: Any) -> None:
    w = world("queue", "one")
    entry = dict(vars(w.st), slots=bad)
    clean, fields = repair("job", entry)
    assert fields == ["slots"] and clean.slots is None and clean.reason == "error"


def test_the_supervisor_ref_is_kept_with_the_slot() -> None:
    w = world("queue", "one")
    run = w.fire(S)
    assert run["supervisor"] == SUPERVISOR and w.st.run["slot"] == slots.label(S)
