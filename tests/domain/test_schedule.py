"""Schedules (DESIGN §3) with a fake clock: every time is a plain float passed in."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from fixed_zone import UTC, zone_of

from loopctl.domain.model import LoopDef, parse_loop
from loopctl.domain.schedule import (
    backoff_factor,
    clamp_delay,
    cron_next,
    first_fire,
    latest_plausible_due,
    missed_count,
    next_fire,
)

MINUTE, HOUR, DAY = 60, 3600, 86400
NY = "America/New_York"


def ts(text: str) -> float:
    """POSIX seconds of an ISO-8601 UTC time like 2026-03-08T07:00:00Z."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def utc(instant: float) -> str:
    return datetime.fromtimestamp(instant, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def loop(**raw: Any) -> LoopDef:
    return parse_loop("job", {"prompt": "p", **raw})


T0 = ts("2026-01-01T00:03:00Z")  # a Thursday, three minutes past midnight UTC


# -- every ---------------------------------------------------------------------


def test_every_first_run_is_due_at_creation() -> None:
    assert first_fire(loop(every="10m"), T0, zone=UTC) == T0
    assert next_fire(loop(every="10m"), now=T0, last_end=None, created=T0, zone=UTC) == T0


def test_every_wait_counts_from_the_end_of_the_run() -> None:
    # A 25-minute run on `every 10m` started at T0 ended at T0+25m: the next run
    # is 10m after the end, not back-to-back and not at T0+10m.
    ended = T0 + 25 * MINUTE
    due = next_fire(loop(every="10m"), now=ended, last_end=ended, created=T0, zone=UTC)
    assert due == ended + 10 * MINUTE


def test_every_next_fire_ignores_now_once_the_run_ended() -> None:
    ended = T0 + 100
    later = ended + 5 * HOUR
    assert next_fire(loop(every="10m"), now=later, last_end=ended, created=T0,
                     zone=UTC) == ended + 600


def test_after_delays_the_first_every_run() -> None:
    lp = loop(every="10m", after="1h")
    assert first_fire(lp, T0, zone=zone_of(lp)) == T0 + HOUR


def test_after_only_affects_the_first_run() -> None:
    lp = loop(every="10m", after="1h")
    ended = T0 + 2 * HOUR
    assert next_fire(lp, now=ended, last_end=ended, created=T0,
                     zone=zone_of(lp)) == ended + 10 * MINUTE


# -- cron ------------------------------------------------------------------------


def test_cron_first_run_is_the_first_slot_after_creation() -> None:
    lp = loop(cron="*/10 * * * *", tz="UTC")
    assert utc(first_fire(lp, T0, zone=zone_of(lp))) == "2026-01-01T00:10:00Z"


def test_cron_first_slot_is_not_immediate_even_for_every_minute() -> None:
    lp = loop(cron="* * * * *", tz="UTC")
    created = T0 + 17  # 00:03:17
    assert utc(first_fire(lp, created, zone=zone_of(lp))) == "2026-01-01T00:04:00Z"


def test_cron_with_after_takes_the_first_slot_after_the_delay() -> None:
    lp = loop(cron="*/10 * * * *", tz="UTC", after="10m")
    # created 00:03 + 10m = 00:13 -> the 00:20 slot, not 00:10
    assert utc(first_fire(lp, T0, zone=zone_of(lp))) == "2026-01-01T00:20:00Z"


def test_cron_evaluated_in_its_zone_and_returned_in_utc() -> None:
    lp = loop(cron="0 9 * * *", tz="Europe/Berlin")  # 09:00 CET = 08:00Z in January
    assert utc(first_fire(lp, T0, zone=zone_of(lp))) == "2026-01-01T08:00:00Z"


def test_cron_next_is_strictly_after() -> None:
    slot = ts("2026-01-01T00:10:00Z")
    assert utc(cron_next("*/10 * * * *", ZoneInfo("UTC"), slot)) == "2026-01-01T00:20:00Z"
    assert utc(cron_next("*/10 * * * *", ZoneInfo("UTC"), slot - 0.5)) == "2026-01-01T00:10:00Z"


def test_cron_after_a_run_takes_the_next_slot_after_now() -> None:
    lp = loop(cron="0 * * * *", tz="UTC")
    ended = ts("2026-01-01T01:05:00Z")
    now = ts("2026-01-01T05:30:00Z")  # the machine slept through four slots
    assert utc(next_fire(lp, now=now, last_end=ended, created=T0,
                         zone=zone_of(lp))) == "2026-01-01T06:00:00Z"


def test_cron_after_a_long_run_takes_the_slot_after_its_end() -> None:
    lp = loop(cron="0 * * * *", tz="UTC")
    ended = ts("2026-01-01T02:10:00Z")
    assert utc(next_fire(lp, now=ended, last_end=ended, created=T0,
                         zone=zone_of(lp))) == "2026-01-01T03:00:00Z"


# -- auto ------------------------------------------------------------------------


def test_auto_uses_the_requested_delay_from_the_end_of_the_run() -> None:
    lp = loop(every="auto")
    ended = T0 + 300
    assert next_fire(lp, now=ended, last_end=ended, created=T0,
                     requested_delay=20 * MINUTE,
                     zone=zone_of(lp)) == ended + 20 * MINUTE


def test_auto_without_a_requested_delay_uses_the_keepalive() -> None:
    lp = loop(every="auto", keepalive="7m")
    ended = T0 + 300
    assert next_fire(lp, now=ended, last_end=ended, created=T0,
                     zone=zone_of(lp)) == ended + 7 * MINUTE


def test_auto_default_keepalive_is_twenty_minutes() -> None:
    lp = loop(every="auto")
    assert next_fire(lp, now=T0, last_end=T0, created=T0, zone=zone_of(lp)) == T0 + 20 * MINUTE


def test_auto_first_run_is_due_at_creation() -> None:
    assert first_fire(loop(every="auto"), T0, zone=UTC) == T0


@pytest.mark.parametrize(
    ("requested", "expected", "clamped"),
    [(10, 60, True), (60, 60, False), (600, 600, False), (3600, 3600, False),
     (7200, 3600, True), (0, 60, True), (-5, 60, True)],
)
def test_clamp_delay_to_default_bounds(requested: float, expected: float, clamped: bool) -> None:
    assert clamp_delay(loop(every="auto"), requested) == (expected, clamped)


def test_clamp_delay_to_custom_bounds() -> None:
    lp = loop(every="auto", min_delay="5m", max_delay="2h")
    assert clamp_delay(lp, 60) == (300, True)
    assert clamp_delay(lp, 3 * HOUR) == (2 * HOUR, True)
    assert clamp_delay(lp, HOUR) == (HOUR, False)


# -- backoff ---------------------------------------------------------------------


@pytest.mark.parametrize(("failures", "factor"),
                         [(-1, 1), (0, 1), (1, 2), (2, 4), (3, 8), (4, 8), (50, 8)])
def test_backoff_doubles_per_failure_capped_at_eight(failures: int, factor: int) -> None:
    assert backoff_factor(failures) == factor


def test_every_backs_off_after_failures() -> None:
    lp = loop(every="10m")
    ended = T0 + 100
    dues = [next_fire(lp, now=ended, last_end=ended, created=T0, failures=n,
                      zone=zone_of(lp)) - ended
            for n in range(6)]
    assert dues == [600, 1200, 2400, 4800, 4800, 4800]


def test_auto_backs_off_after_failures() -> None:
    lp = loop(every="auto", keepalive="5m")
    assert next_fire(lp, now=T0, last_end=T0, created=T0, failures=2,
                     zone=zone_of(lp)) == T0 + 4 * 300


# -- missed time -----------------------------------------------------------------


def test_missed_count_every() -> None:
    lp = loop(every="10m")
    due = T0
    assert missed_count(lp, due, due, zone=zone_of(lp)) == 0
    assert missed_count(lp, due, due - 500, zone=zone_of(lp)) == 0
    assert missed_count(lp, due, due + 599, zone=zone_of(lp)) == 0
    assert missed_count(lp, due, due + 600, zone=zone_of(lp)) == 1
    assert missed_count(lp, due, due + 3 * 600 + 5, zone=zone_of(lp)) == 3


def test_missed_count_cron_counts_slots_after_the_due_one() -> None:
    lp = loop(cron="0 * * * *", tz="UTC")
    due = ts("2026-01-01T00:00:00Z")
    now = ts("2026-01-01T05:30:00Z")  # 01:00 .. 05:00 were missed
    assert missed_count(lp, due, now,
                        zone=zone_of(lp)) == 5
    assert missed_count(lp, due, ts("2026-01-01T05:00:00Z"),
                        zone=zone_of(lp)) == 5  # (due, now] includes now
    assert missed_count(lp, due, ts("2026-01-01T00:59:59Z"), zone=zone_of(lp)) == 0


def test_missed_count_auto_is_zero() -> None:
    assert missed_count(loop(every="auto"), T0, T0 + 10 * DAY, zone=UTC) == 0


def test_missed_every_minute_for_a_year_is_bounded_and_sane() -> None:
    # 525,600 minutes in 2026; counting them one by one would be slow, and the
    # count must still be right to the minute (UTC has no irregular minutes).
    lp = loop(cron="* * * * *", tz="UTC")
    due = ts("2026-01-01T00:00:00Z")
    now = ts("2027-01-01T00:00:00Z")
    assert missed_count(lp, due, now, zone=zone_of(lp)) == 365 * 24 * 60


def test_missed_every_minute_for_a_year_in_a_dst_zone_is_sane() -> None:
    lp = loop(cron="* * * * *", tz=NY)
    due = ts("2026-01-01T05:00:00Z")
    now = ts("2027-01-01T05:00:00Z")
    count = missed_count(lp, due, now, zone=zone_of(lp))
    # Within an hour either way of one fire per minute.
    assert abs(count - 365 * 24 * 60) <= 60


def test_missed_every_for_a_year() -> None:
    assert missed_count(loop(every="1s"), T0, T0 + 365 * DAY, zone=UTC) == 365 * DAY


def test_next_fire_after_downtime_collapses_to_one_catch_up_from_now() -> None:
    # Every hour, down for ten hours: the next due time is the single next slot
    # after now, never one of the stale ones in between.
    lp = loop(cron="0 * * * *", tz="UTC")
    last_end = ts("2026-01-01T00:00:10Z")
    now = ts("2026-01-01T10:20:00Z")
    due = next_fire(lp, now=now, last_end=last_end, created=T0, zone=zone_of(lp))
    assert utc(due) == "2026-01-01T11:00:00Z"


# -- clock plausibility ----------------------------------------------------------


def test_latest_plausible_due_every_allows_the_full_backoff() -> None:
    assert latest_plausible_due(loop(every="10m"), T0, zone=UTC) == T0 + 8 * 600


def test_latest_plausible_due_every_allows_a_long_after() -> None:
    assert latest_plausible_due(loop(every="10m", after="1d"), T0, zone=UTC) == T0 + DAY


def test_latest_plausible_due_auto_uses_the_longest_delay() -> None:
    assert latest_plausible_due(loop(every="auto"), T0, zone=UTC) == T0 + 8 * HOUR
    assert latest_plausible_due(loop(every="auto", keepalive="2h"), T0, zone=UTC) == T0 + 16 * HOUR


def test_latest_plausible_due_cron_is_the_next_slot() -> None:
    lp = loop(cron="0 12 * * *", tz="UTC")
    assert utc(latest_plausible_due(lp, T0, zone=zone_of(lp))) == "2026-01-01T12:00:00Z"


def test_every_backoff_due_is_always_plausible() -> None:
    lp = loop(every="10m")
    for failures in range(10):
        due = next_fire(lp, now=T0, last_end=T0, created=T0, failures=failures, zone=zone_of(lp))
        assert due <= latest_plausible_due(lp, T0, zone=zone_of(lp))


# -- DST (America/New_York, 2026) -------------------------------------------------


def fires_between(expr: str, zone: str, start: float, end: float) -> list[str]:
    out, t = [], start
    while True:
        t = cron_next(expr, ZoneInfo(zone), t)
        if t >= end:
            return out
        out.append(utc(t))


# Local midnights of the transition days, in UTC.
FALL_DAY = (ts("2026-11-01T04:00:00Z"), ts("2026-11-02T05:00:00Z"))  # 25 hours long
SPRING_DAY = (ts("2026-03-08T05:00:00Z"), ts("2026-03-09T04:00:00Z"))  # 23 hours long


def test_dst_repeated_wall_time_fires_once_at_its_first_occurrence() -> None:
    # 2026-11-01: 01:30 happens at 05:30Z (EDT) and again at 06:30Z (EST).
    assert fires_between("30 1 * * *", NY, *FALL_DAY) == ["2026-11-01T05:30:00Z"]


def test_dst_repeated_wall_time_from_every_starting_point() -> None:
    start, end = FALL_DAY
    first, next_day = ts("2026-11-01T05:30:00Z"), ts("2026-11-02T06:30:00Z")
    for after in range(int(start), int(end), 5 * MINUTE):
        expected = first if after < first else next_day
        assert cron_next("30 1 * * *", ZoneInfo(NY), after) == expected, utc(after)


def test_dst_skipped_wall_time_fires_once_at_the_transition() -> None:
    # 2026-03-08: 02:00 EST jumps to 03:00 EDT at 07:00Z; 02:30 never happens.
    assert fires_between("30 2 * * *", NY, *SPRING_DAY) == ["2026-03-08T07:00:00Z"]


def test_dst_skipped_wall_time_from_every_starting_point() -> None:
    start, end = SPRING_DAY
    transition, next_day = ts("2026-03-08T07:00:00Z"), ts("2026-03-09T06:30:00Z")
    for after in range(int(start), int(end), 5 * MINUTE):
        expected = transition if after < transition else next_day
        assert cron_next("30 2 * * *", ZoneInfo(NY), after) == expected, utc(after)


def test_dst_days_around_the_transitions_fire_once_each() -> None:
    spring = fires_between("30 2 * * *", NY, ts("2026-03-06T05:00:00Z"),
                           ts("2026-03-11T04:00:00Z"))
    assert spring == ["2026-03-06T07:30:00Z", "2026-03-07T07:30:00Z",
                      "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z",
                      "2026-03-10T06:30:00Z"]
    fall = fires_between("30 1 * * *", NY, ts("2026-10-30T04:00:00Z"),
                         ts("2026-11-04T05:00:00Z"))
    assert fall == ["2026-10-30T05:30:00Z", "2026-10-31T05:30:00Z",
                    "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z",
                    "2026-11-03T06:30:00Z"]


def test_dst_hourly_cron_fires_once_per_wall_hour_on_fall_back() -> None:
    # 25 real hours, 24 distinct wall hours: the repeated 01:00 fires once.
    fires = fires_between("0 * * * *", NY, FALL_DAY[0] - 1, FALL_DAY[1] - 1)
    assert len(fires) == 24
    assert len(set(fires)) == 24
    assert "2026-11-01T05:00:00Z" in fires and "2026-11-01T06:00:00Z" not in fires


def test_dst_hourly_cron_on_spring_forward_has_no_duplicates() -> None:
    fires = fires_between("0 * * * *", NY, SPRING_DAY[0] - 1, SPRING_DAY[1] - 1)
    # 02:00 does not exist: it maps to the transition, which is also 03:00 EDT.
    assert len(fires) == len(set(fires)) == 23


def _next_days(expr: str, count: int = 6) -> list[str]:
    out, instant = [], T0
    for _ in range(count):
        instant = cron_next(expr, UTC, instant)
        out.append(datetime.fromtimestamp(instant, timezone.utc).strftime("%a %d"))
    return out


@pytest.mark.parametrize(("expr", "days"), [
    # a field starting with `*` makes both day fields must-match (crontab(5), cronie)
    ("0 0 */2 * 1", ["Mon 05", "Mon 19", "Mon 09", "Mon 23", "Mon 09", "Mon 23"]),
    ("0 0 * * */3", ["Sat 03", "Sun 04", "Wed 07", "Sat 10", "Sun 11", "Wed 14"]),
    ("0 0 1-31/10 * */5", ["Sun 11", "Sun 01", "Sun 01", "Fri 01", "Sun 31", "Sun 21"]),
    # both restricted: either matches
    ("0 0 1,15 * 1", ["Mon 05", "Mon 12", "Thu 15", "Mon 19", "Mon 26", "Sun 01"]),
    ("0 0 1-31/2 * 1", ["Sat 03", "Mon 05", "Wed 07", "Fri 09", "Sun 11", "Mon 12"]),
])
def test_day_of_month_and_week_as_crontab_reads_them(expr: str, days: list[str]) -> None:
    assert _next_days(expr) == days


def test_a_one_value_range_is_that_value_not_the_whole_field() -> None:
    # croniter alone reads `5-5` as `*` (every day); cron reads it as the 5th
    assert _next_days("0 0 5-5 * *", 2) == ["Mon 05", "Thu 05"]
