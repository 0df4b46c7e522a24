"""A damaged state.json entry (DESIGN §11), field by field: a claimed run is
kept only when every part of it is sane (its times, its supervisor's and
agent's process refs), a delivery error only when it is well-formed, and keys
added after state version 1 shipped may be absent without pausing the loop."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fixed_zone import zone_of

from loopctl.domain.model import parse_loop
from loopctl.domain.state import LATE_KEYS, display_status, new_loop_state, repair

NOW = 1_780_000_000.0
RUN_ID = "20260528T201320Z-0003"


def entry_with_run(**run_changes: Any) -> dict[str, Any]:
    loop = parse_loop("x", {"prompt": "p", "every": "1h"})
    entry = new_loop_state(loop, NOW, zone=zone_of(loop))
    entry.run = {"run_id": RUN_ID, "iteration": 3, "due_at": NOW, "claimed_at": NOW,
                 "started_at": NOW + 0.5, "missed": 0, "trigger": "schedule",
                 "supervisor": {"pid": 4242, "ct": NOW}, "agent": {"pid": 4243, "ct": NOW},
                 "spec": {"prompt": "p", "every": "1h"}, "hook": None, "notify": []}
    entry.run.update(run_changes)
    return json.loads(json.dumps(vars(entry)))


def test_a_sane_claimed_run_is_kept_as_is() -> None:
    entry = entry_with_run()
    clean, bad = repair("x", entry)
    assert bad == [] and clean.run == entry["run"]
    assert display_status(clean) == "running"


@pytest.mark.parametrize("change", [
    {"claimed_at": "yesterday"}, {"claimed_at": float("inf")}, {"started_at": -5},
    {"supervisor": {"pid": 1, "ct": NOW}},            # pid 1 is never a supervisor
    {"supervisor": {"pid": 4242}},                    # no create time
    {"agent": {"pid": 2**40, "ct": NOW}}, {"agent": "4243"},
    {"trigger": "cron"}, {"missed": -1}, {"notify": ["ok://x", 5]}, {"hook": ["/bin/x"]},
])
def test_a_claimed_run_with_one_bad_part_is_dropped_and_the_loop_paused(
        change: dict[str, Any]) -> None:
    clean, bad = repair("x", entry_with_run(**change))
    assert bad == ["run"]
    assert clean.run is None
    assert (clean.status, clean.reason) == ("paused", "error")
    assert display_status(clean) == "paused"


def test_a_well_formed_delivery_error_is_kept() -> None:
    entry = entry_with_run()
    entry["hook_error"] = {"at": NOW, "message": "hook exited 3", "status": "failed"}
    entry["notify_error"] = None
    clean, bad = repair("x", entry)
    assert bad == [] and clean.hook_error == entry["hook_error"]


@pytest.mark.parametrize("value", [
    "hook exited 3", {"message": "no time"}, {"at": NOW, "message": "x" * 1001},
    {"at": "now", "message": "m"},
])
def test_a_malformed_delivery_error_is_reset(value: Any) -> None:
    entry = entry_with_run()
    entry["notify_error"] = value
    clean, bad = repair("x", entry)
    assert bad == ["notify_error"] and clean.notify_error is None
    assert (clean.status, clean.reason) == ("paused", "error")


def test_keys_added_after_version_1_may_be_missing_but_older_keys_may_not() -> None:
    entry = entry_with_run()
    for key in LATE_KEYS:
        del entry[key]
    clean, bad = repair("x", entry)
    assert bad == [] and clean.status == "active"
    assert {getattr(clean, k) for k in ("hook_error", "notify_error", "last_handoff")} == {None}
    del entry["seq"]
    clean, bad = repair("x", entry)
    assert bad == ["seq"] and (clean.status, clean.seq) == ("paused", 0)


def test_an_entry_that_is_no_mapping_is_replaced_whole() -> None:
    clean, bad = repair("x", ["active"])
    assert bad == ["the entry itself"]
    assert (clean.status, clean.reason, clean.run) == ("paused", "error", None)
    assert "the entry itself" in clean.note


def test_a_loop_without_an_entry_shows_as_invalid() -> None:
    assert display_status(None) == "invalid"
