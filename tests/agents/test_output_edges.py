"""What an agent's output says, at the edges (DESIGN §6, §11): a reset time
that is no time of day, Copilot's error result, a decision line only quoted
in passing, and run ids typed by users. Pure: fixed clocks, no processes."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from loopctl.agents import readers
from loopctl.domain.errors import UsageError
from loopctl.domain.untrusted import check_run_id, decision_from_text

NOW = datetime(2026, 1, 15, 10, 0, tzinfo=timezone.utc).timestamp()


@pytest.mark.parametrize("text", [
    "You've hit your limit · resets 25:00",
    "Claude usage limit reached. Your limit will reset at 9:75pm",
])
def test_a_reset_time_that_is_no_time_of_day_is_a_limit_without_a_reset(text: str) -> None:
    assert readers.rate_limit(text, now=NOW) == (True, None)


def jl(*events: object) -> bytes:
    return ("\n".join(json.dumps(e) for e in events) + "\n").encode()


def test_a_copilot_error_result_fails_the_run_with_its_message() -> None:
    out = jl({"type": "session.start", "data": {"sessionId": "cp-1"}},
             {"type": "assistant.message", "data": {"content": "Working."}},
             {"type": "result", "sessionId": "cp-1", "is_error": True,
              "error": "model overloaded"})
    reading = readers.READERS["copilot"](out, out, 1)
    assert (reading.is_error, reading.error) == (True, "model overloaded")
    assert (reading.session_id, reading.result_text) == ("cp-1", "Working.")
    assert not reading.rate_limited


def test_a_copilot_rate_limit_result_defers() -> None:
    out = jl({"type": "result", "is_error": True,
              "result": "429 Too Many Requests: rate limit exceeded"})
    reading = readers.READERS["copilot"](out, out, 1)
    assert reading.is_error and reading.rate_limited
    assert reading.error == "429 Too Many Requests: rate limit exceeded"


def test_a_decision_line_quoted_mid_sentence_decides_nothing_and_notes_nothing() -> None:
    text = ('I would end with LOOPCTL-DECISION: {"decision": "complete"} but the '
            "tests still fail.")
    assert decision_from_text(text) == (None, [])


@pytest.mark.parametrize("value", ["latest", "../20261130T031500Z-0007",
                                   "20261130T031500Z-7", "20261130T031500Z-0007.json", ""])
def test_a_run_id_not_in_loopctls_syntax_is_refused(value: str) -> None:
    with pytest.raises(UsageError) as info:
        check_run_id(value)
    assert info.value.message == (f"bad run id {value!r}: expected an id like "
                                  "20261130T031500Z-0007 (see `loopctl history NAME`)")
    assert info.value.code == 2


def test_a_run_id_in_loopctls_syntax_is_returned() -> None:
    assert check_run_id("20261130T031500Z-0007") == "20261130T031500Z-0007"
