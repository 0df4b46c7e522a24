"""A run that ends without a readable cost is charged an estimate against
`--budget-usd`: the loop's most expensive run so far (DESIGN §18)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from fixed_zone import UTC, zone_of

from conftest import CLI, TESTS
from loopctl.domain import lifecycle
from loopctl.domain.model import parse_loop
from loopctl.domain.records import clean_record
from loopctl.domain.state import LoopState, RunResult, Settled, new_loop_state

T0 = 1_800_000_000.0


def settle(loop: Any, st: LoopState, outcome: str, cost: float | None, at: float) -> Settled:
    lifecycle.claim(loop, st, at, "schedule", zone=UTC)
    return lifecycle.settle(loop, st, RunResult(outcome, 0, at, at + 1, cost_usd=cost), at + 1,
                            zone=UTC)


def test_a_timed_out_run_is_charged_the_most_expensive_run_so_far() -> None:
    loop = parse_loop("l", {"prompt": "p", "every": "1m", "agent": "claude",
                            "budget_usd": 2.5, "max_failures": 5})
    st = new_loop_state(loop, T0, zone=UTC)
    settle(loop, st, "ok", 0.5, T0)
    settle(loop, st, "ok", 1.2, T0 + 60)
    settle(loop, st, "ok", 0.3, T0 + 120)
    extra = settle(loop, st, "timeout", None, T0 + 180)
    assert (extra.cost_usd, extra.cost_estimated) == (1.2, True)
    assert extra.note is not None and "no cost read: charged $1.2" in extra.note
    assert st.cost_usd == pytest.approx(3.2)
    assert (st.status, st.reason) == ("paused", "budget_limit")


@pytest.mark.parametrize("outcome, cost, budget", [
    ("timeout", None, None),  # no budget: nothing to protect
    ("ok", 0.0, 5.0),  # a cost read as 0 is a cost
    ("skipped", None, 5.0),  # the gate found nothing: no agent ran
    ("gate_error", None, 5.0),
])
def test_no_estimate_where_nothing_unknown_was_spent(outcome: str, cost: float | None,
                                                     budget: float | None) -> None:
    raw: dict[str, Any] = {"prompt": "p", "every": "1m", "agent": "claude"}
    loop = parse_loop("l", dict(raw, budget_usd=budget) if budget else raw)
    st = new_loop_state(loop, T0, zone=UTC)
    settle(loop, st, "ok", 0.7, T0)
    extra = settle(loop, st, outcome, cost, T0 + 60)
    assert "cost_estimated" not in extra.to_json()
    assert st.cost_usd == pytest.approx(0.7)


def test_before_any_run_cost_something_the_estimate_is_nothing() -> None:
    loop = parse_loop("l", {"prompt": "p", "every": "1m", "budget_usd": 1.0})
    st = new_loop_state(loop, T0, zone=UTC)
    assert "cost_estimated" not in settle(loop, st, "killed", None, T0).to_json()
    assert st.cost_usd == 0.0


def test_a_lost_run_is_charged_too() -> None:
    loop = parse_loop("l", {"prompt": "p", "every": "1m", "agent": "claude",
                            "budget_usd": 10.0})
    state: dict[str, Any] = {"loops": {}}
    lifecycle.reconcile({"l": loop}, {}, state, T0, zones=zone_of)
    st = state["loops"]["l"]
    settle(loop, st, "ok", 0.9, T0)
    st.next_due = T0 + 100
    [(_, run)] = lifecycle.plan({"l": loop}, {}, state, T0 + 100, lambda ref: True,
                                zones=zone_of).fired
    run["supervisor"] = {"pid": 5, "ct": 1.0}
    result = lifecycle.plan({"l": loop}, {}, state, T0 + 200, lambda ref: False, zones=zone_of)
    assert [lost["cost_estimate"] for _, lost in result.lost] == [0.9]
    assert st.cost_usd == pytest.approx(1.8)


def test_the_record_keeps_the_mark_and_only_a_true_one() -> None:
    assert clean_record({"run_id": "r", "cost_estimated": True}, "r").cost_estimated is True
    assert "cost_estimated" not in clean_record({"run_id": "r", "cost_estimated": "yes"},
                                                "r").to_json()


def test_a_killed_runaway_counts_toward_the_budget(cli: CLI, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The real supervisor and a Claude stand-in: one run that costs $0.40,
    then one that hangs until its timeout and reports nothing."""
    monkeypatch.setenv("PATH", str(TESTS / "bin") + os.pathsep + os.environ["PATH"])
    hang = tmp_path / "hang"
    # The first run must finish on a loaded machine (CI), so only the hanging
    # run gets the short timeout.
    cli("start", "--name", "spender", "--every", "1h", "--agent", "claude", "--timeout", "60s",
        "--budget-usd", "0.7", "--env", "FAKE_COST=0.4", "--env", f"FAKE_HANG_IF={hang}",
        "--", "p", check=0)
    cli("run", "spender", check=0)
    cli("update", "spender", "--timeout", "1s", check=0)
    hang.touch()
    cli("run", "spender", check=124)
    first, second = cli.records("spender")
    assert (first["cost_usd"], "cost_estimated" in first) == (0.4, False)
    assert (second["outcome"], second["cost_usd"], second["cost_estimated"]) == \
        ("timeout", 0.4, True)
    status = cli.json("status", "spender")
    assert (status["status"], status["reason"]) == ("paused", "budget_limit")
    assert status["cost_usd"]["spent"] == pytest.approx(0.8)


def test_the_record_of_a_lost_run_says_its_cost_is_an_estimate(home: Path) -> None:
    import json

    from loopctl.engine.firing import record_lost
    from loopctl.storage.store import Store

    store = Store()
    run = {"run_id": "20261202T000000Z-0001", "iteration": 1, "due_at": T0,
           "cost_estimate": 0.9, "queued_s": 3.5}
    record_lost(store, "l", run, T0 + 5)
    record = json.loads(store.paths.run_record("l", run["run_id"]).read_text())
    assert (record["outcome"], record["cost_usd"], record["cost_estimated"],
            record["queued_s"]) == ("lost", 0.9, True, 3.5)
