"""state.json's growth per run is bounded (issue 30): a loop run 1,000
times keeps an entry no larger than what the schema allows, and past its
capped lists a run adds nothing but the counters' digits. Pure: the runs
are folded in with `lifecycle.claim`/`settle` on a fake clock, and the
entry is measured as `Store.write_state` writes it (packed, compact JSON).
"""

from __future__ import annotations

import json

import pytest
from fixed_zone import UTC

from loopctl.domain import lifecycle
from loopctl.domain.errors import UsageError
from loopctl.domain.model import MAX_NO_PROGRESS, LoopDef, parse_loop
from loopctl.domain.names import is_run_id
from loopctl.domain.state import (
    OUTCOMES,
    RECENT,
    SCHEMA,
    LoopState,
    RunResult,
    new_loop_state,
    repair,
)
from loopctl.storage.atomic import strict_json

START = 1_800_000_000.0
DIGEST = 16  # hex characters of a result digest (valves.result_digest)
COUNTER = 12  # digits a counter may reach in any test's lifetime, and more
RUN_ID = len("20261130T031500Z-0007") + 2  # the sequence may grow past four digits


def entry_bytes(st: LoopState) -> int:
    return len(strict_json(st.to_json()))


def schema_bound(loop: LoopDef, summary: str) -> int:
    """The most a settled run can leave in the entry, from the schema's caps:
    every field's key, the lists at their caps with their longest item, the
    counters at COUNTER digits, times as floats, the last decision with the
    summary given, and the note at its limit. The fixed part is a fresh
    entry as written."""
    longest_outcome = max(map(len, OUTCOMES))
    bound = entry_bytes(new_loop_state(loop, START, zone=UTC))
    bound += sum(len(key) + 4 for key in SCHEMA)  # `"key":` and a comma
    bound += RECENT * (longest_outcome + 3)
    bound += max(loop.no_progress, 1) * (DIGEST + 3)
    bound += 6 * COUNTER  # iterations, failures, seq, keepalive_misses, deferrals, cost
    bound += 5 * 24  # last_end, next_due, ended_at, observed_at, resume_at as floats
    bound += RUN_ID + longest_outcome + 2 * 2  # last_run_id, last_outcome, quotes
    bound += len(json.dumps({"decision": "continue", "summary": summary, "evidence": None}))
    bound += 2000 + 2  # the note's limit (plain text here)
    return bound


@pytest.mark.parametrize("no_progress", [3, 100, MAX_NO_PROGRESS])
def test_a_thousand_runs_keep_the_entry_within_the_schema_bound(no_progress: int) -> None:
    loop = parse_loop("grow", {"prompt": "p", "command": ["true"], "every": "1m",
                               "max_runs": 0, "max_failures": 0, "no_progress": no_progress,
                               "for": "3650d"})
    st = new_loop_state(loop, START, zone=UTC)
    now = START
    summary = "did one more thing " * 10
    sizes = []
    for n in range(1000):
        now += 60
        lifecycle.claim(loop, st, now, "schedule", zone=UTC)
        outcome = ("ok", "failed", "ok", "timeout")[n % 4]
        lifecycle.settle(loop, st, RunResult(
            outcome=outcome, exit_code=0 if outcome == "ok" else 1, started_at=now,
            ended_at=now + 1, decision={"decision": "continue", "summary": summary},
            result_text=f"result number {n}", session_id=f"s-{n}", cost_usd=0.01,
            track_progress=True), now + 1, zone=UTC)
        sizes.append(entry_bytes(st))
    assert st.status == "active", (st.status, st.reason)
    assert st.iterations == 1000 and is_run_id(st.last_run_id)
    # Every distinct result the breaker compares is kept, and no more (half
    # the runs are ok, and only those give a result).
    assert len(st.results) == min(no_progress, 500)
    bound = schema_bound(loop, summary)
    assert max(sizes) <= bound, (max(sizes), bound)
    # Past the caps, a run adds only the counters' digits: per-run growth
    # over the last hundred runs is a few bytes, never an item a run.
    capped = 2 * max(no_progress, RECENT)  # runs until both lists are full
    if capped < 900:
        # (windows of four: the outcomes cycle with that period)
        grown = max(sizes[-4:]) - max(sizes[capped:capped + 4])
        assert grown <= 24, (grown, sizes[capped:][:8], sizes[-8:])
    # What was written reads back clean: the repair rule takes it as it is.
    _, bad = repair("grow", json.loads(json.dumps(vars(st))))
    assert bad == []


def test_no_progress_is_capped_where_the_repair_rule_keeps_results() -> None:
    """A definition may not ask the breaker to compare more results than
    state.json keeps: above the cap it is refused in one line; at it, a full
    list of distinct results passes the repair rule."""
    raw = {"prompt": "p", "command": ["true"], "every": "1h"}
    with pytest.raises(UsageError, match=f"'no_progress' must be a whole number from 0 to "
                                         f"{MAX_NO_PROGRESS}, got {MAX_NO_PROGRESS + 1}"):
        parse_loop("np", dict(raw, no_progress=MAX_NO_PROGRESS + 1))
    loop = parse_loop("np", dict(raw, no_progress=MAX_NO_PROGRESS))
    st = new_loop_state(loop, START, zone=UTC)
    st.results = [f"{n:016x}" for n in range(loop.no_progress)]
    clean, bad = repair("np", st)
    assert bad == [] and clean.results == st.results


def test_new_entries_hold_the_schema_initials_and_share_no_list() -> None:
    """`new_loop_state` copies one prepared entry: each field is its
    SCHEMA initial (bar what the definition decides), and no two entries
    share a list (appending to one loop's outcomes must not touch another's)."""
    loop = parse_loop("a", {"prompt": "p", "command": ["true"], "every": "1h"})
    first = new_loop_state(loop, START, zone=UTC)
    second = new_loop_state(loop, START + 1, zone=UTC)
    decided = {"created", "deadline", "schedule_key", "next_due"}
    assert {k: v for k, v in vars(first).items() if k not in decided} == {
        k: f.initial for k, f in SCHEMA.items() if k not in decided}
    assert list(vars(first)) == list(SCHEMA)
    for key, value in vars(first).items():
        if isinstance(value, (list, dict)):
            assert value is not getattr(second, key), key
    first.outcomes.append("ok")
    assert second.outcomes == [] and SCHEMA["outcomes"].initial == []
    assert (first.created, second.created) == (START, START + 1)
