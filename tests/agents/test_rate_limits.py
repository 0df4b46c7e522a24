"""Usage limits and rate limits in agent output (DESIGN §6; issue 4): each
agent's limit report with an epoch or a wall-clock reset time, a limit with no
reset, output of shell and `--command` loops (never a limit), and
`readers.rate_limit()` / `readers.next_wall_time()` on known texts, across
days and a DST change. Nothing here reads the real clock or sleeps: reset
times are computed against fixed `now` values in fixed time zones.
"""

from __future__ import annotations

import calendar
import os
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace

import pytest
from agents_support import (
    AGENT_OUTPUTS,
    AGENTS,
    assert_reading_types,
    claude_result,
    command_loop,
    jl,
    log_header,
    make_loop,
    read,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopctl.agents import readers
from loopctl.agents.presets import read_output

# -- fixed clocks --------------------------------------------------------------------

UTC = "UTC0"
NEW_YORK = "EST5EDT,M3.2.0,M11.1.0"  # POSIX rule: needs no tz database


def utc(*fields: int) -> float:
    return float(calendar.timegm((*fields, 0)[:6]))


@pytest.fixture
def local_tz() -> Iterator[Callable[[str], None]]:
    """Set the process's local time zone for the test; restore it afterwards."""
    saved = os.environ.get("TZ")

    def use(tz: str) -> None:
        os.environ["TZ"] = tz
        time.tzset()

    yield use
    if saved is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = saved
    time.tzset()


NOW = utc(2026, 1, 15, 10, 0, 0)  # Thursday 10:00 UTC
NEXT_1PM = utc(2026, 1, 15, 13, 0, 0)


@pytest.fixture
def frozen(local_tz: Callable[[str], None], monkeypatch: pytest.MonkeyPatch) -> float:
    """Local time is UTC and the readers' clock says NOW."""
    local_tz(UTC)
    monkeypatch.setattr(readers, "time", SimpleNamespace(time=lambda: NOW))
    return NOW


# -- usage limits with reset times ---------------------------------------------------

LIMIT_PRESETS = [n for n in AGENTS if AGENT_OUTPUTS[n].fail is not None]


@pytest.mark.parametrize("name", LIMIT_PRESETS)
def test_usage_limit_with_epoch_reset(name: str) -> None:
    fail = AGENT_OUTPUTS[name].fail
    assert fail is not None
    reading = read(name, fail("Claude AI usage limit reached|1767225600"), 1)
    assert reading.rate_limited
    assert reading.reset_at == 1767225600.0


@pytest.mark.parametrize("name", LIMIT_PRESETS)
def test_usage_limit_with_wall_clock_reset(name: str, frozen: float) -> None:
    fail = AGENT_OUTPUTS[name].fail
    assert fail is not None
    reading = read(name, fail("You've hit your limit · resets 1pm (UTC)"), 1)
    assert reading.rate_limited
    assert reading.reset_at == NEXT_1PM


@pytest.mark.parametrize("name", LIMIT_PRESETS)
def test_plain_rate_limit_without_reset(name: str) -> None:
    fail = AGENT_OUTPUTS[name].fail
    assert fail is not None
    reading = read(name, fail("429 Too Many Requests: rate limit exceeded"), 1)
    assert reading.rate_limited and reading.reset_at is None


def test_claude_usage_limit_result_texts(frozen: float) -> None:
    out = jl(claude_result("Claude AI usage limit reached|1767225600", is_error=True))
    reading = read("claude", out, 0)
    assert reading.rate_limited and reading.reset_at == 1767225600.0
    out = jl(claude_result("You've hit your limit · resets 1pm", is_error=True))
    reading = read("claude", out, 1)
    assert reading.rate_limited and reading.reset_at == NEXT_1PM


@pytest.mark.parametrize("output", [
    b"curl: (22) The requested URL returned error: 429 Too Many Requests\n",
    b"ERROR: rate limit exceeded; usage limit reached|1767225600\n",
    b"You've hit your limit \xc2\xb7 resets 1pm\n",
])
def test_shell_and_command_output_is_never_a_rate_limit(output: bytes) -> None:
    for loop in (make_loop("shell"), command_loop("prog {prompt}")):
        log = log_header(loop, "curl -f https://example.invalid") + output
        reading = read_output(loop, log, log, 0)
        assert_reading_types(reading)
        assert not reading.rate_limited and reading.reset_at is None
        assert not reading.is_error
        assert reading.result_text == output.decode().strip()


# -- rate_limit() and next_wall_time() with fixed clocks -----------------------------


def test_next_wall_time_later_today(local_tz: Callable[[str], None]) -> None:
    local_tz(UTC)
    assert readers.next_wall_time(1, 0, "pm", NOW) == NEXT_1PM
    assert readers.next_wall_time(13, 0, None, NOW) == NEXT_1PM
    assert readers.next_wall_time(1, 30, "PM", NOW) == utc(2026, 1, 15, 13, 30, 0)
    assert readers.next_wall_time(12, 0, "pm", NOW) == utc(2026, 1, 15, 12, 0, 0)
    assert readers.next_wall_time(10, 1, None, NOW) == utc(2026, 1, 15, 10, 1, 0)


def test_next_wall_time_rolls_to_tomorrow(local_tz: Callable[[str], None]) -> None:
    local_tz(UTC)
    assert readers.next_wall_time(9, 0, "am", NOW) == utc(2026, 1, 16, 9, 0, 0)
    assert readers.next_wall_time(12, 0, "am", NOW) == utc(2026, 1, 16, 0, 0, 0)
    assert readers.next_wall_time(10, 0, None, NOW) == utc(2026, 1, 16, 10, 0, 0)  # == now
    at_1pm = utc(2026, 1, 15, 13, 0, 0)
    assert readers.next_wall_time(1, 0, "pm", at_1pm) == utc(2026, 1, 16, 13, 0, 0)
    late = utc(2026, 1, 15, 23, 59, 59)
    assert readers.next_wall_time(1, 0, "pm", late) == utc(2026, 1, 16, 13, 0, 0)


def test_next_wall_time_is_local_time(local_tz: Callable[[str], None]) -> None:
    local_tz(NEW_YORK)
    now = utc(2026, 1, 15, 15, 0, 0)  # 10:00 EST
    assert readers.next_wall_time(1, 0, "pm", now) == utc(2026, 1, 15, 18, 0, 0)


def test_next_wall_time_across_a_dst_change(local_tz: Callable[[str], None]) -> None:
    local_tz(NEW_YORK)
    now = utc(2026, 3, 7, 19, 0, 0)  # Sat 14:00 EST; clocks go forward on Sunday
    # Sunday 13:00 is EDT: 17:00 UTC, 23 hours later, not now + 1 day at 18:00 UTC.
    assert readers.next_wall_time(1, 0, "pm", now) == utc(2026, 3, 8, 17, 0, 0)


@pytest.mark.parametrize(("text", "expected"), [
    ("Claude AI usage limit reached|1767225600", (True, 1767225600.0)),
    ("You've hit your limit · resets 1pm", (True, NEXT_1PM)),
    ("You've hit your limit · resets 1pm (Europe/Lisbon)", (True, NEXT_1PM)),
    ("You've hit your limit · resets 3:30am (Europe/Moscow)",
     (True, utc(2026, 1, 16, 3, 30, 0))),
    ("Claude usage limit reached. Your limit will reset at 5pm (Europe/Warsaw).",
     (True, utc(2026, 1, 15, 17, 0, 0))),
    ("API Error: Request rejected (429) · rate limit", (True, None)),
    ("429 Too Many Requests", (True, None)),
    ("RESOURCE_EXHAUSTED: Quota exceeded", (True, None)),
    ("all tests pass", (False, None)),
    ("", (False, None)),
    ("resets 1pm", (False, None)),  # a time alone is not a limit
])
def test_rate_limit_texts(text: str, expected: tuple[bool, float | None],
                          local_tz: Callable[[str], None]) -> None:
    local_tz(UTC)
    assert readers.rate_limit(text, now=NOW) == expected


def test_rate_limit_date_form_never_guesses_a_wrong_time(
        local_tz: Callable[[str], None]) -> None:
    local_tz(UTC)
    limited, reset = readers.rate_limit(
        "You've hit your limit · resets Jan 30, 11:30am (Asia/Calcutta)", now=NOW)
    assert limited
    assert reset in (None, utc(2026, 1, 30, 11, 30, 0))


def test_rate_limit_claude_session_limit(local_tz: Callable[[str], None]) -> None:
    local_tz(UTC)
    text = "You've hit your session limit · resets 12:50pm (America/Los_Angeles)"
    assert readers.rate_limit(text, now=NOW) == (True, utc(2026, 1, 15, 12, 50, 0))


def test_rate_limit_codex_try_again_at(local_tz: Callable[[str], None]) -> None:
    local_tz(UTC)
    text = ("You've hit your usage limit. To get more access now, send a request to your "
            "admin or try again at 12:16 PM.")
    assert readers.rate_limit(text, now=NOW) == (True, utc(2026, 1, 15, 12, 16, 0))


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(text=st.text(max_size=200))
def test_rate_limit_never_raises(text: str) -> None:
    limited, reset = readers.rate_limit(text, now=NOW)
    assert isinstance(limited, bool)
    assert reset is None or (limited and isinstance(reset, float))
