"""Attention events are records (issue 52 item 2); their JSON is the
contract of events.jsonl and of every hook's stdin (DESIGN §7): the keys in
the order they always had, each kind's own keys last."""

from __future__ import annotations

import json
from types import SimpleNamespace

from loopctl.domain.accounts import AccountMark
from loopctl.domain.model import parse_loop
from loopctl.domain.state import LoopState, new_loop_state
from loopctl.domain.timestamps import UTC
from loopctl.engine import events, run_accounts
from loopctl.engine.steps import settle

BASE = ["version", "status", "reason", "loop", "summary", "evidence", "objective", "iteration",
        "max_runs", "elapsed_s", "deadline_remaining_s", "run_id", "log", "cwd", "cost_usd",
        "ended_at", "observed_at", "at"]
LOOP = parse_loop("l", {"prompt": "p", "every": "10m", "max_runs": 5})


def paused() -> LoopState:
    st = new_loop_state(LOOP, 1000.0, zone=UTC)
    st.status, st.reason = "paused", "failure_limit"
    return st


def keys(event: events.Event | None) -> list[str]:
    assert event is not None
    # Through the text a hook reads: the order survives serialization.
    return list(json.loads(json.dumps(event.to_json())))


def test_a_status_event_keeps_its_keys_in_order() -> None:
    event = events.attention(LOOP, paused(), "r1", "log", 1100.0, "why")
    assert keys(event) == BASE
    assert event.to_json()["evidence"] == {"source": "loopctl", "text": "0 failures in a row: why"}


def test_a_handoff_event_adds_branch_and_pr_last() -> None:
    handoff = SimpleNamespace(failure="push\nfailed", review=None, fields={"branch": "b"})
    event = events.handoff_event(LOOP, paused(), "r1", "log", 1100.0, handoff)
    assert keys(event) == [*BASE, "branch", "pr"]
    assert event is not None and event.to_json()["evidence"] == {"source": "loopctl",
                                                                 "text": "push failed"}
    assert (event.reason, event.branch, event.pr) == ("handoff_failed", "b", None)


def test_a_protected_event_adds_the_paths_last() -> None:
    guarded = SimpleNamespace(changed=["a\nb", "c"])
    event = settle.protected_event(SimpleNamespace(run_id="r1"), guarded,  # type: ignore[arg-type]
                                   LOOP, paused(), "log", 1100.0)
    assert keys(event) == [*BASE, "protected"]
    assert event is not None and event.protected == ["a b", "c"]


def test_an_account_event_adds_the_account_last() -> None:
    entry = AccountMark(kind="rate_limited", preset="claude", since=1000.0, until=2000.0,
                        loop="l", run_id=None, error=None, fix="log in", loops=["l", "m"])
    event = run_accounts.account_event(LOOP, paused(), "r1", "log", entry, 1100.0)
    assert keys(event) == [*BASE, "account"]
    assert event.to_json()["account"] == {"preset": "claude", "kind": "rate_limited",
                                          "until": "1970-01-01T00:33:20Z", "loops": ["l", "m"],
                                          "fix": None}
