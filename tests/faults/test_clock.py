"""Faults 8, 9 and 10: the wall clock jumps (LOOPCTL_CLOCK_OFFSET shifts
loopctl's clock per process; the machine's clock is left alone).

- 8: a year forward: bounded work, one catch-up run, the missed count recorded.
- 9: two hours back after a run: no duplicate run, no stall.
- 10: DST in America/New_York: `30 1 * * *` and `30 2 * * *` fire once on the
  fall-back day and once on the spring-forward day.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from conftest import CLI, wait_for
from loopctl.domain.schedule import TICK_EARLY_S

from .support import clock_at, shifted, ts

YEAR = 365 * 86400
NEW_YORK = ZoneInfo("America/New_York")


def start_plain(cli: CLI, name: str, *schedule: str) -> None:
    cli("start", "p", "--name", name, *schedule, "--command", "true", check=0)


def tick_wait(cli: CLI, env: dict[str, str]) -> dict:
    return cli.json("tick", "--wait", env=env)


# -- 8: a year forward -------------------------------------------------------------


@pytest.mark.parametrize("schedule,expected_missed", [
    (("--every", "10m"), YEAR // 600),
    (("--cron", "* * * * *", "--tz", "UTC"), YEAR // 60),
], ids=["every-10m", "cron-every-minute"])
def test_a_year_forward_gives_one_catch_up_run_with_the_missed_count(
        cli: CLI, schedule: tuple[str, ...], expected_missed: int) -> None:
    start_plain(cli, "sleeper", *schedule, "--for", "400d")
    if schedule[0] == "--every":
        tick_wait(cli, {})  # the first run, at the real clock
    # The tick completes (cli's own timeout bounds it); no time is asserted.
    report = tick_wait(cli, shifted(YEAR))
    assert [f["loop"] for f in report["fired"]] == ["sleeper"], report
    missed = report["fired"][0]["missed"]
    # Give or take the minutes this test itself takes, and the occurrence the
    # catch-up run stands for.
    assert expected_missed - 20 <= missed <= expected_missed, missed
    (record,) = report["runs"]
    assert record["outcome"] == "ok" and record["missed"] == missed
    assert cli.records("sleeper")[-1]["missed"] == missed
    # Exactly one: the next fire is computed from now, not from the stale due.
    next_fire = ts(cli.json("status", "sleeper", env=shifted(YEAR))["next_fire"])
    assert next_fire > time.time() + YEAR - 60
    # (Further ahead than a tick fires a whole-minute interval early.)
    early = next_fire - TICK_EARLY_S - 10
    assert cli.json("tick", env=clock_at(early))["fired"] == []
    following = tick_wait(cli, clock_at(next_fire + 1))
    assert [f["missed"] for f in following["fired"]] == [0], following
    assert ts(following["fired"][0]["due_at"]) == next_fire


def test_a_year_forward_past_the_deadline_expires_instead_of_running(cli: CLI) -> None:
    start_plain(cli, "short", "--every", "10m", "--for", "7d")
    tick_wait(cli, {})
    report = tick_wait(cli, shifted(YEAR))
    assert report["fired"] == [], report
    status = cli.json("status", "short", env=shifted(YEAR))
    assert status["status"] == "expired"
    # The deadline is calendar time: it ended at the deadline, observed now.
    assert status["ended_at"] == status["deadline"]
    assert ts(status["observed_at"]) > time.time() + YEAR - 600
    assert len(cli.records("short")) == 1


# -- 9: two hours back ---------------------------------------------------------------

BACK = -2 * 3600


def run_once_then(cli: CLI, every: str) -> None:
    start_plain(cli, "pace", "--every", every)
    assert len(tick_wait(cli, {})["fired"]) == 1


@pytest.mark.parametrize("every", [
    pytest.param("10m"),
    "1h",
])
def test_clock_back_after_a_run_does_not_run_it_again(cli: CLI, every: str) -> None:
    run_once_then(cli, every)
    report = cli.json("tick", env=shifted(BACK))
    assert report["fired"] == [], report
    assert len(cli.records("pace")) == 1


@pytest.mark.parametrize("every,seconds", [
    ("10m", 600),
    pytest.param("1h", 3600),
])
def test_clock_back_after_a_run_fires_again_within_the_interval(
        cli: CLI, every: str, seconds: int) -> None:
    run_once_then(cli, every)
    # A driver (cron, every minute) notices the jump: the loop re-arms as if
    # its last run had just ended, so it fires one interval later, not 2 h.
    assert cli.json("tick", env=shifted(BACK))["fired"] == []
    report = cli.json("tick", env=shifted(BACK + seconds + 30))
    assert [f["loop"] for f in report["fired"]] == ["pace"], report


def test_clock_back_on_a_cron_loop_neither_repeats_nor_stalls(cli: CLI) -> None:
    now = time.time()
    slot = (int(now) // 600 + 1) * 600  # the next */10 slot
    start_plain(cli, "tenth", "--cron", "*/10 * * * *", "--tz", "UTC")
    assert len(tick_wait(cli, clock_at(slot + 5))["fired"]) == 1
    back = slot + 5 + BACK
    assert cli.json("tick", env=clock_at(back))["fired"] == []
    # The next slot of the shifted clock fires, once.
    next_slot = (int(back) // 600 + 1) * 600
    assert cli.json("tick", env=clock_at(next_slot - 60))["fired"] == []
    report = tick_wait(cli, clock_at(next_slot + 5))
    assert [f["loop"] for f in report["fired"]] == ["tenth"], report
    assert ts(report["fired"][0]["due_at"]) == next_slot
    assert len(cli.records("tenth")) == 2


def test_clock_back_keeps_the_newest_run_newest(cli: CLI) -> None:
    start_plain(cli, "order", "--every", "10m", "--keep-runs", "1")
    tick_wait(cli, {})
    cli("tick", env=shifted(BACK), check=0)  # a driver notices the jump and re-arms
    cli("tick", "--wait", env=shifted(BACK + 630))  # the second run, on the set-back clock
    history = cli.json("history", "order")["runs"]
    assert [r["iteration"] for r in history] == [2], history
    assert "(iteration 2)" in cli("logs", "order").stdout


# -- 10: DST --------------------------------------------------------------------------


def local(day: tuple[int, int, int], hour: int, minute: int = 0, fold: int = 0) -> float:
    return datetime(*day, hour, minute, tzinfo=NEW_YORK, fold=fold).timestamp()


def utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()


@pytest.mark.slow
@pytest.mark.parametrize("day,expected", [
    # Fall back: 01:00-02:00 happens twice; 01:30 fires the first time (EDT).
    ((2026, 11, 1), {"one-thirty": "2026-11-01T05:30:00", "two-thirty": "2026-11-01T07:30:00"}),
    # Spring forward: 02:00-03:00 does not exist; 02:30 fires at the jump (03:00 EDT).
    ((2026, 3, 8), {"one-thirty": "2026-03-08T06:30:00", "two-thirty": "2026-03-08T07:00:00"}),
], ids=["fall-back", "spring-forward"])
def test_dst_day_fires_each_daily_cron_once(cli: CLI, day: tuple[int, int, int],
                                            expected: dict[str, str]) -> None:
    eve = datetime(*day, tzinfo=NEW_YORK) - timedelta(hours=12)
    created = clock_at(eve.timestamp())
    for name, hour in (("one-thirty", 1), ("two-thirty", 2)):
        cli("start", "p", "--name", name, "--cron", f"30 {hour} * * *", "--tz",
            "America/New_York", "--command", "true", env=created, check=0)
    # Walk the night in 15-minute steps of real (UTC) time, 7 minutes past
    # each quarter so no step lands on a slot: 00:07 to 04:07 local time,
    # through the repeated or the missing hour.
    begin, end = local(day, 0, 7), local(day, 4, 7)
    ticks = 0
    moment = begin
    while moment <= end:
        # A plain `tick` (the fast path when nothing is due, as from cron);
        # a run it starts settles before the clock moves on.
        cli("tick", "--quiet", env=clock_at(moment), check=0)
        wait_for(lambda: not any(st["run"] for st in cli.state()["loops"].values()))
        moment += 15 * 60
        ticks += 1
    assert ticks >= 13
    for name, due in expected.items():
        records = cli.records(name)
        assert len(records) == 1, (name, records)
        assert ts(records[0]["due_at"]) == utc(due), (name, records)
        assert records[0]["outcome"] == "ok" and records[0]["missed"] == 0, records
    # And the next day is back to normal: 01:30 and 02:30 local.
    after = clock_at(end)
    for name, hour in (("one-thirty", 1), ("two-thirty", 2)):
        status = cli.json("status", name, env=after)
        next_day = (datetime(*day) + timedelta(days=1)).timetuple()[:3]
        assert ts(status["next_fire"]) == local(next_day, hour, 30), (name, status)
