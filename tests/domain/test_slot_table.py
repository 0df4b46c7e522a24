"""One table over every driver (issue 50 item 6, DESIGN §20), as Kubernetes
tests its CronJob controller (TestControllerV2SyncCronJob): overlap policy ×
catch-up (one, none, a 20m window) × a run in flight × `now` (on the slot,
late inside the window, late past it, after the clock stepped back) ×
driver (a `tick`, a daemon pass, `run --scheduled`), on a fake clock and a
fake process table, asserting what fires and which slot it serves, the
skips with their reasons, and the next due time.

`tick` and the daemon decide through `lifecycle.plan` (a tick as a minute
tick); `run --scheduled` through `slots.for_scheduled` and then the same
pass for that loop, in the order `commands/drivers.claim_now` calls them.
"""

from __future__ import annotations

from typing import Any

import pytest
from fixed_zone import UTC
from lifecycle_support import HOUR, MINUTE, World, make, ts

from loopctl.domain import lifecycle, slots

S = ts("2026-01-01T01:00:00Z")  # the first slot of an hourly loop made at 00:03
ON, LATE_IN, LATE_PAST, BACK = "on the slot", "late inside", "late past", "stepped back"
NOW = {ON: S, LATE_IN: S + 10 * MINUTE, LATE_PAST: S + 3 * HOUR + 40 * MINUTE, BACK: S}
WHEN = list(NOW)


def world(overlap: str, catch_up: str) -> World:
    window = {"catch_up_window": "20m"} if catch_up == "window" else {"catch_up": catch_up}
    return World(make(cron="0 * * * *", overlap=overlap, **window))


def drive(w: World, driver: str, now: float) -> dict[str, Any]:
    """One fire of `driver` at `now`: the slot it fires (None: none), the
    skip reasons on record, whether it stopped at a run in flight."""
    if driver != "scheduled":
        result = lifecycle.plan({w.loop.name: w.loop}, {}, w.state, now, w.procs,
                                zones=w.zones, minute_tick=driver == "tick")
        fired = [run["slot"] for _, run in result.fired]
        return {"fires": fired[0] if fired else None, "busy": False,
                "skips": [e.reason for _, e in result.slot_skips]}
    instant, why, entry = slots.for_scheduled(w.loop, w.st, now, UTC)
    skips = [entry.reason] if entry else []
    if why is not None and (entry is not None or instant is None or not w.st.run):
        return {"fires": None, "skips": skips, "busy": False}  # exit 0, saying why
    result = lifecycle.plan({w.loop.name: w.loop}, {}, w.state, now, w.procs,
                            only=w.loop.name, zones=w.zones)
    if w.st.run and not result.fired or why is not None:  # exit 75 first, then 0
        return {"fires": None, "busy": bool(w.st.run),
                "skips": skips + [e.reason for _, e in result.slot_skips]}
    entries = slots.unskip(w.st, result.slot_skips, w.loop.name, instant)
    if not result.fired:
        lifecycle.claim(w.loop, w.st, now, "schedule", zone=UTC, instant=instant)
    run = result.fired[0][1] if result.fired else w.st.run
    if result.fired and instant is not None:  # the slot asked for (drivers._serve)
        w.st.forget_slot(run["run_id"])
        slots.remember(w.st, instant, f"run {run['run_id']}")
        run["slot"] = slots.label(instant)
    return {"fires": run["slot"], "busy": False, "skips": skips + [e.reason
                                                                  for _, e in entries]}


def expected(driver: str, overlap: str, catch_up: str, flight: bool, when: str
             ) -> tuple[float | None, list[str], float, bool]:
    """The table: the slot fired (None: none), the skip reasons, the next
    due time, whether it stopped at the run in flight (`run --scheduled`'s
    exit 75). One row per line where the drivers or policies differ."""
    scheduled = driver == "scheduled"
    # `run --scheduled` refuses a taken or too old slot before the pass
    # (exit 0): the due time stays as it was, S, for the next pass of any
    # driver to re-arm (it finds S taken or skipped and re-arms from now).
    if when == BACK:  # S was served before the clock went back: never again
        return None, [], S if scheduled and not flight else S + HOUR, scheduled and flight
    if scheduled and catch_up == "window" and when == LATE_PAST:
        return None, ["outside_window"], S, False
    if flight:  # a run of 00:00 still going when S comes due
        skips = ["overlap_skip"] if overlap == "skip" else []
        after = S + (4 * HOUR if when == LATE_PAST else HOUR)
        return None, skips, after, scheduled
    if when == ON:
        return S, [], S + HOUR, False
    if when == LATE_IN:
        if catch_up == "none" and not scheduled:  # 10 minutes late: past the 2m grace
            return None, ["catch_up_none"], S + HOUR, False
        return S, [], S + HOUR, False  # a scheduler's late fire is its slot's
    latest = S + 3 * HOUR  # late past: S..S+3h came due, the latest 40 minutes ago
    if catch_up == "window":
        return None, ["outside_window"], S + 4 * HOUR, False
    if catch_up == "none":
        # tick and the daemon skip all four; run --scheduled serves the
        # latest (its scheduler fired for it) and skips the three before.
        return (latest, ["catch_up_none"], S + 4 * HOUR, False) if scheduled else \
            (None, ["catch_up_none"], S + 4 * HOUR, False)
    return latest, ["missed"], S + 4 * HOUR, False  # one catch-up, the others folded in


@pytest.mark.parametrize("driver", ["tick", "daemon", "scheduled"])
@pytest.mark.parametrize("overlap", ["queue", "skip", "replace"])
@pytest.mark.parametrize("catch_up", ["one", "none", "window"])
@pytest.mark.parametrize("flight", [False, True], ids=["idle", "in-flight"])
@pytest.mark.parametrize("when", WHEN)
def test_every_driver_fires_skips_and_rearms_as_the_table_says(
        driver: str, overlap: str, catch_up: str, flight: bool, when: str) -> None:
    w = world(overlap, catch_up)
    if when == BACK:
        w.fire(S)
        if not flight:
            w.finish(S + 5 * MINUTE)
        w.plan(S - 40 * MINUTE)  # the clock went back 40 minutes; a pass saw it
    elif flight:
        w.st.next_due = S - HOUR
        w.fire(S - HOUR)
    served = w.st.slots
    got = drive(w, driver, NOW[when])
    fires, skips, next_due, busy = expected(driver, overlap, catch_up, flight, when)
    assert got["fires"] == (slots.label(fires) if fires is not None else None), got
    assert got["skips"] == skips, got
    assert got["busy"] is busy, got
    assert w.st.next_due == next_due, (w.st.next_due - S) / 60
    if fires is None and when == BACK:
        assert w.st.slots == served  # nothing new served
    if fires is not None:
        assert w.st.slots["high"] == fires
