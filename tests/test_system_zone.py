"""A cron loop without `--tz` is evaluated in the system zone (DESIGN §3):
`TZ` first (with or without its leading colon), then /etc/localtime when
`TZ` names no zone. Pure: fixed instants, no processes."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from loopctl.domain import schedule

# Thursday 2026-01-15 12:00 UTC
NOW = datetime(2026, 1, 15, 12, 0, tzinfo=timezone.utc).timestamp()


def utc(year: int, month: int, day: int, hour: int, minute: int) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=timezone.utc).timestamp()


@pytest.fixture
def system_zone() -> Iterator[pytest.MonkeyPatch]:
    """`schedule.zone` caches the system zone for the life of a process:
    start and end each test with an empty cache. A monkeypatch of its own,
    undone here, so that undoing it leaves the home fixture's in place."""
    schedule.zone.cache_clear()
    with pytest.MonkeyPatch.context() as patch:
        yield patch
    schedule.zone.cache_clear()


@pytest.mark.parametrize(("tz", "expected"), [
    ("Asia/Tokyo", utc(2026, 1, 16, 0, 0)),          # 09:00 JST is midnight UTC
    (":America/New_York", utc(2026, 1, 15, 14, 0)),  # 09:00 EST, glibc's `:` form
    ("UTC", utc(2026, 1, 16, 9, 0)),
])
def test_a_cron_loop_without_tz_follows_the_tz_variable(
        system_zone: pytest.MonkeyPatch, tz: str, expected: float) -> None:
    system_zone.setenv("TZ", tz)
    assert schedule.cron_next("0 9 * * *", None, NOW) == expected


def test_a_tz_variable_naming_no_zone_falls_back_to_etc_localtime(
        system_zone: pytest.MonkeyPatch) -> None:
    try:
        with open("/etc/localtime", "rb") as handle:
            local = ZoneInfo.from_file(handle, key="localtime")
    except OSError:
        pytest.skip("this machine has no /etc/localtime")
    system_zone.setenv("TZ", "Not/A_Zone")
    slot = datetime(2026, 1, 16, 9, 0, tzinfo=local).timestamp()
    if slot - 86400 > NOW:
        slot -= 86400
    assert schedule.cron_next("0 9 * * *", None, NOW) == slot
    assert schedule.zone(None).utcoffset(datetime(2026, 1, 15)) == \
        local.utcoffset(datetime(2026, 1, 15))
