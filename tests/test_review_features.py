"""A review of the check, PR feedback, notes and accounts as an attacker and
a newcomer: each test here guards a finding (pure or in-process, cheap)."""

from __future__ import annotations

from typing import Any

import pytest
from fixed_zone import UTC

from loopctl.domain import lifecycle, verify
from loopctl.domain.checks import MAX_COMMAND
from loopctl.domain.errors import UsageError
from loopctl.domain.model import parse_loop
from loopctl.domain.state import RunResult, new_loop_state


def loop_with(**extra: Any) -> Any:
    return parse_loop("l", {"prompt": "make the tests pass", "every": "1m", "agent": "claude",
                            "check": "pytest -q", **extra})


def refused(raw: dict[str, Any]) -> str:
    base: dict[str, Any] = {"prompt": "p", "every": "1m"}
    if "command" not in raw:
        base["agent"] = "claude"
    with pytest.raises(UsageError) as caught:
        parse_loop("l", {**base, **raw})
    return caught.value.message


# -- hand-edited loops.yaml --------------------------------------------------------------


@pytest.mark.parametrize("key", ["check", "command", "if"])
def test_a_nul_in_a_command_is_refused_where_it_is_written(key: str) -> None:
    # Found: `check: ["a\0b"]` was valid; the supervisor then died on
    # execve's ValueError and the loop sat `running` until the reaper.
    raw: dict[str, Any] = {key: ["prog", "a\0b"]}
    if key == "if":
        raw["command"] = ["true"]  # a gate needs no agent
    message = refused(raw)
    assert "NUL" in message and "\n" not in message


@pytest.mark.parametrize("value", [
    "x" * (MAX_COMMAND + 1),                   # one word (shlex was minutes on 8 MiB)
    ["a"] * (MAX_COMMAND // 2 + 1),            # many short arguments
])
def test_a_huge_check_is_refused_in_one_short_line(value: object) -> None:
    message = refused({"check": value})
    assert f"longer than {MAX_COMMAND}" in message and len(message) < 200
    # What a person writes still passes.
    assert loop_with(check="pytest -q -x tests/").check == ("pytest", "-q", "-x", "tests/")


def test_a_huge_bad_duration_is_quoted_short() -> None:
    # Found: a 10 MiB `check_timeout` made a 10 MiB error line (validate,
    # ls, status all print it); every duration key shares the message.
    for key in ("check_timeout", "timeout"):
        message = refused({"check": "true", key: "x" * (10 * 2**20)})
        assert f"bad '{key}' 'xxx" in message and len(message) < 200, key


# -- the check's metric and a rate limit ---------------------------------------------------


def settle(loop: Any, st: Any, outcome: str, metric: float, now: float) -> None:
    st["status"], st["reason"], st["resume_at"] = "active", None, None  # the reset came
    lifecycle.claim(loop, st, now, "schedule", zone=UTC)
    check = verify.check_record(1, 1.0, "3 passed\n", metric)
    lifecycle.settle(loop, st, RunResult(outcome, 0, now, now + 1, check=check,
                                         track_progress=True), now + 1, zone=UTC)


def test_a_rate_limited_run_does_not_use_up_no_progress() -> None:
    # Found: a `deferred` run (the account hit its limit; the run gives its
    # iteration back) still fed its unchanged metric to --no-progress, so a
    # loop that met a usage limit twice paused `no_progress` after one run.
    loop = loop_with(check_metric=r"(\d+) passed", no_progress=3, max_failures=0)
    st = new_loop_state(loop, 1000.0, zone=UTC)
    for i, outcome in enumerate(("ok", "deferred", "deferred", "ok")):
        settle(loop, st, outcome, 3.0, 1000.0 + 100 * i)
    assert (st["status"], st["reason"]) == ("active", None)
    settle(loop, st, "ok", 3.0, 2000.0)  # three real runs, the metric unchanged
    assert (st["status"], st["reason"]) == ("paused", "no_progress")
