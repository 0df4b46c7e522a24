"""A cron loop without `--tz` is evaluated in the system zone (DESIGN §3):
`TZ` first (with or without its leading colon), then /etc/localtime when
`TZ` names no zone. The zone is read at the edge (`clock.zone_of`) and
passed to the pure schedule. Fixed instants, no processes."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from conftest import CLI
from loopctl import clock
from loopctl.domain import schedule, timestamps
from loopctl.domain.model import parse_loop

# Thursday 2026-01-15 12:00 UTC
NOW = datetime(2026, 1, 15, 12, 0, tzinfo=timezone.utc).timestamp()
NINE = parse_loop("job", {"prompt": "p", "cron": "0 9 * * *"})


def utc(year: int, month: int, day: int, hour: int, minute: int) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=timezone.utc).timestamp()


@pytest.mark.parametrize(("tz", "expected"), [
    ("Asia/Tokyo", utc(2026, 1, 16, 0, 0)),          # 09:00 JST is midnight UTC
    (":America/New_York", utc(2026, 1, 15, 14, 0)),  # 09:00 EST, glibc's `:` form
    ("UTC", utc(2026, 1, 16, 9, 0)),
])
def test_a_cron_loop_without_tz_follows_the_tz_variable(
        monkeypatch: pytest.MonkeyPatch, tz: str, expected: float) -> None:
    monkeypatch.setenv("TZ", tz)
    assert schedule.first_fire(NINE, NOW, zone=clock.zone_of(NINE)) == expected


def test_a_changed_tz_variable_is_seen_by_the_same_process(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    tokyo = schedule.first_fire(NINE, NOW, zone=clock.zone_of(NINE))
    monkeypatch.setenv("TZ", "America/New_York")
    assert schedule.first_fire(NINE, NOW, zone=clock.zone_of(NINE)) != tokyo


def test_a_loop_with_tz_ignores_the_system_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    berlin = parse_loop("job", {"prompt": "p", "cron": "0 9 * * *", "tz": "Europe/Berlin"})
    assert schedule.first_fire(berlin, NOW, zone=clock.zone_of(berlin)) == \
        utc(2026, 1, 16, 8, 0)  # 09:00 CET


def test_a_tz_variable_naming_no_zone_falls_back_to_etc_localtime(
        monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        with open("/etc/localtime", "rb") as handle:
            local = ZoneInfo.from_file(handle, key="localtime")
    except OSError:
        pytest.skip("this machine has no /etc/localtime")
    monkeypatch.setenv("TZ", "Not/A_Zone")
    slot = datetime(2026, 1, 16, 9, 0, tzinfo=local).timestamp()
    if slot - 86400 > NOW:
        slot -= 86400
    assert schedule.first_fire(NINE, NOW, zone=clock.zone_of(NINE)) == slot
    assert clock.zone_of(NINE).utcoffset(datetime(2026, 1, 15)) == \
        local.utcoffset(datetime(2026, 1, 15))



def local_hour(iso: str, zone: str) -> tuple[int, int]:
    moment = datetime.fromtimestamp(timestamps.parse_iso(iso), ZoneInfo(zone))
    return moment.hour, moment.minute


def test_the_commands_read_the_system_zone_and_pass_it_in(cli: CLI) -> None:
    """The edge, not the schedule, reads `TZ`: `start` arms a loop without
    `--tz` at 09:00 in the zone of the process that made it, and `update`
    re-arms it in the zone of the process that changed it."""
    cli("start", "--cron", "0 9 * * *", "--name", "nine", "p",
        env={"TZ": "Asia/Tokyo"}, check=0)
    assert local_hour(cli.json("status", "nine")["next_fire"], "Asia/Tokyo") == (9, 0)
    cli("update", "nine", "--cron", "0 10 * * *", env={"TZ": "America/New_York"}, check=0)
    rearmed = cli.json("status", "nine")["next_fire"]
    assert local_hour(rearmed, "America/New_York") == (10, 0), rearmed


def test_only_a_cron_loop_reads_the_tz_database(cli: CLI) -> None:
    """The zone is read for a cron expression alone: an `--every` run loads
    no zoneinfo (several ms of every run), a cron loop's does."""
    from conftest import imported_modules

    cli("start", "p", "--every", "1h", "--name", "paced", "--command", "true", check=0)
    assert "zoneinfo" not in imported_modules("run", "paced")
    cli("start", "p", "--cron", "0 3 * * *", "--name", "timed", "--command", "true", check=0)
    assert "zoneinfo" in imported_modules("run", "timed", "--force")
