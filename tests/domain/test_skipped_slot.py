"""The skipped-slot record (issue 52 item 2): `slots.skip` returns a
SkippedSlot whose line is byte for byte what loopctl wrote when it was a
mapping (LINES: main's `json.dumps(slots.skip(...))` at bf586f0, one line
per caller's set of fields), and a line, marker or store row is checked
field by field before it becomes one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loopctl.domain import slots
from loopctl.domain.model import LoopDef
from loopctl.domain.skipped import SkippedSlot
from loopctl.domain.state import LoopState
from loopctl.domain.timestamps import UTC
from loopctl.storage.paths import Paths
from loopctl.storage.runs import append_skips, read_skips, skips_file

T = 1.8e9 + 3600
RUN = "20270115T080000Z-0007"
# (reason, slot instant, the caller's fields) -> the line main wrote.
LINES: list[tuple[str, float | None, dict[str, Any], str]] = [
    ("missed", None, {"count": 3, "run_id": RUN},
     '{"slot": null, "reason": "missed", "at": "2027-01-15T09:00:07Z", "count": 3, '
     '"run_id": "20270115T080000Z-0007"}'),
    ("catch_up_none", T, {"count": 2},
     '{"slot": "schedule:2027-01-15T09:00:00Z", "reason": "catch_up_none", '
     '"at": "2027-01-15T09:00:07Z", "count": 2}'),
    ("outside_window", T, {"count": 1},
     '{"slot": "schedule:2027-01-15T09:00:00Z", "reason": "outside_window", '
     '"at": "2027-01-15T09:00:07Z", "count": 1}'),
    ("overlap_skip", T, {"run_id": RUN},
     '{"slot": "schedule:2027-01-15T09:00:00Z", "reason": "overlap_skip", '
     '"at": "2027-01-15T09:00:07Z", "run_id": "20270115T080000Z-0007"}'),
    ("held", T, {"kind": "rate_limited"},
     '{"slot": "schedule:2027-01-15T09:00:00Z", "reason": "held", '
     '"at": "2027-01-15T09:00:07Z", "kind": "rate_limited"}'),
    ("deferred", None, {"count": 4, "by": "usage_limit"},
     '{"slot": null, "reason": "deferred", "at": "2027-01-15T09:00:07Z", "count": 4, '
     '"by": "usage_limit"}'),
    ("definition_differs", T, {"machine": "box-1"},
     '{"slot": "schedule:2027-01-15T09:00:00Z", "reason": "definition_differs", '
     '"at": "2027-01-15T09:00:07Z", "machine": "box-1"}'),
    ("gate_no_work", None, {},
     '{"slot": null, "reason": "gate_no_work", "at": "2027-01-15T09:00:07Z"}'),
]


def state() -> LoopState:
    return LoopState.fresh(LoopDef(name="a", cron="0 * * * *"), 1.8e9, zone=UTC)


@pytest.mark.parametrize(("reason", "instant", "fields", "line"), LINES,
                         ids=[case[0] for case in LINES])
def test_a_skip_writes_the_line_main_wrote_and_reads_back_the_same(
        reason: str, instant: float | None, fields: dict[str, Any], line: str) -> None:
    entry = slots.skip(state(), reason, instant, T + 7.25, **fields)
    assert json.dumps(entry.to_json()) == line
    assert SkippedSlot.from_json(json.loads(line)) == entry


def test_skipped_jsonl_holds_those_bytes_and_a_home_machine_comes_last(tmp_path: Path) -> None:
    paths = Paths(tmp_path / "config", tmp_path / "state")
    st = state()
    entries = [("a", slots.skip(st, reason, instant, T + 7.25, **fields))
               for reason, instant, fields, _ in LINES]
    append_skips(paths, entries)
    assert skips_file(paths, "a").read_text() == "".join(line + "\n" for *_, line in LINES)
    assert read_skips(paths, "a") == [entry for _, entry in entries]
    # The team outbox names the machine after the caller's fields, as
    # `entry.setdefault("machine", ...)` did.
    named = slots.skip(st, "catch_up_none", T, T + 7.25, count=2, machine="box-2")
    assert json.dumps(named.to_json()).endswith('"count": 2, "machine": "box-2"}')


GOOD = json.loads(LINES[0][3])


@pytest.mark.parametrize("change", [
    {"reason": "coffee"}, {"reason": None}, {"reason": ["missed"]},
    {"at": None}, {"at": 1800003607}, {"at": "yesterday"}, {"at": "2027-01-15T09:00:07Z\n"},
    {"at": "99999-01-01T00:00:00Z"},
    {"slot": "schedule:\x1b[2J2027"}, {"slot": "elsewhere:x"}, {"slot": 7}, {"slot": "s" * 201},
    {"count": -1}, {"count": True}, {"count": "3"}, {"count": 1.5}, {"count": 10**10},
    {"run_id": "../../etc/passwd"}, {"run_id": 7},
    {"by": "me"}, {"kind": "free"}, {"machine": "box\n[fake] line"}, {"machine": 3},
    {"machine": "m" * 101},
], ids=repr)
def test_a_hostile_value_refuses_the_line(change: dict[str, Any]) -> None:
    assert SkippedSlot.from_json(GOOD) is not None
    assert SkippedSlot.from_json({**GOOD, **change}) is None


@pytest.mark.parametrize("data", [None, [], "missed", 3, {"slot": None}])
def test_what_is_no_mapping_of_a_skip_is_refused(data: Any) -> None:
    assert SkippedSlot.from_json(data) is None


def test_a_key_loopctl_does_not_write_is_not_carried() -> None:
    read = SkippedSlot.from_json({**GOOD, "note": "\x1b]0;owned\x07", "count": 3})
    assert read is not None and read.to_json() == GOOD
