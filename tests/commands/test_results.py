"""Each command's result record prints exactly the documented `--json` keys,
in their order (docs/command-guide.md, docs/files.md): a field renamed,
dropped, added or moved in a record fails here before any user's script
does. The LOOP object's record and the columns `ls --json` is built from
name the same keys."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from loop_object_support import loop_object

from loopctl.commands.control import Controlled, Removed
from loopctl.commands.doctor import Report
from loopctl.commands.loop_view import InvalidLoop, LoopObject
from loopctl.commands.notes import Notes
from loopctl.commands.setup import AgentRow, Agents
from loopctl.commands.trigger import Triggered
from loopctl.commands.validation import Validation
from loopctl.commands.views import (
    GateSkips,
    History,
    Shown,
    SkippedSlots,
    loop_columns,
)
from loopctl.domain.digest import Digest
from loopctl.domain.model import parse_loop
from loopctl.domain.result import Result
from loopctl.domain.state import new_loop_state
from loopctl.fast.data_class import fields

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "command-guide.md"

AGENT = AgentRow("shell", "sh", "/bin/sh", None, ["sh", "-c", "PROMPT"], False, True, [], None,
                 "yes", ["~"], False, None)

# Each result, made with one value per field, and the keys its JSON has.
DOCUMENTED: list[tuple[Result | Any, list[str]]] = [
    (Controlled("a", "paused", "paused", "user"),
     ["version", "loop", "message", "status", "reason"]),
    (Removed("a", True, []), ["version", "loop", "removed", "kept_branches"]),
    (Notes("a", "text", 4, True, False),
     ["version", "loop", "notes", "bytes", "enabled", "cleared"]),
    (Triggered("a", True, 1, None, "now", None, "2026-12-06T00:00:00Z", "none", None),
     ["version", "loop", "accepted", "triggers", "payload_bytes", "when", "run_in_flight",
      "at", "driver", "driver_pid"]),
    (Validation("loops.yaml", ["a"], {}, 8, {}, []),
     ["version", "file", "valid", "invalid", "max_concurrent", "max_concurrent_per_agent",
      "warnings"]),
    (Shown("a", {"prompt": "p", "every": "1h"}), ["version", "name", "definition"]),
    (Report(True, []), ["version", "healthy", "findings"]),
    (Report(False, []).sent([]), ["version", "healthy", "findings", "notified"]),
    (Digest("a", "b", [], [], {"runs": 0, "cost_usd": 0}),
     ["version", "since", "until", "needs_you", "loops", "total"]),
    (Digest("a", "b", [], []).sent([]),
     ["version", "since", "until", "needs_you", "loops", "total", "notified"]),
    (History("a", [], GateSkips(1, "r", None)), ["version", "loop", "runs", "skipped"]),
    (GateSkips(1, "r", None), ["count", "last_run_id", "last_gate_output"]),
    (InvalidLoop("a", "bad"), ["name", "status", "error", "version"]),
    (SkippedSlots("a", []), ["version", "loop", "skipped_slots"]),
    (Agents([], {"available": True, "status": "landlock ABI 4"}),
     ["version", "agents", "sandbox"]),
    (AGENT, ["preset", "binary", "path", "version", "argv", "prompt_on_stdin", "safe_default",
             "yolo", "warning", "verified", "sandbox_write", "confined_by_default", "install"]),
]


@pytest.mark.parametrize(("result", "keys"), DOCUMENTED,
                         ids=[type(r).__name__ for r, _ in DOCUMENTED])
def test_the_json_of_each_result_has_the_documented_keys(result: Any, keys: list[str]) -> None:
    assert list(result.to_json()) == keys


def test_the_guide_documents_those_keys() -> None:
    """Where the guide spells a shape out (`{"version": 1, "loop", ...}`),
    it is the record's."""
    text = " ".join(GUIDE.read_text().split())
    for result, keys in DOCUMENTED:
        said = re.escape('{"version": 1, ' + ", ".join(f'"{k}"' for k in keys[1:]))
        if type(result) in (Notes, Triggered):
            assert re.search(said, text), f"{type(result).__name__}: {keys}"


def test_version_is_1_and_nested_records_are_json() -> None:
    assert Agents([AGENT], {}).to_json()["agents"] == [AGENT.to_json()]
    shape = History("a", [], GateSkips(2, "r", "out")).to_json()
    assert shape["version"] == 1
    assert shape["skipped"] == {"count": 2, "last_run_id": "r", "last_gate_output": "out"}
    assert History("a", [], None).to_json()["skipped"] is None


def one_loop() -> LoopObject:
    return loop_object()


def test_the_loop_object_names_the_keys_ls_json_writes() -> None:
    loop = parse_loop("a", {"prompt": "p", "every": "1h", "agent": "shell"})
    columns = loop_columns([loop], [new_loop_state(loop, 1.0e9, zone=None)], 1.0e9)
    shown = one_loop()
    assert list(shown.as_loop()) == list(columns)
    assert list(shown.to_json()) == [*columns, "version"]
    declared = [f for f in fields(LoopObject) if f not in ("own", "fix", "limits",
                                                            "queue_place")]
    assert declared == list(columns)  # no field of the table shown as its own today


def test_what_status_tells_a_person_stays_out_of_the_json() -> None:
    told = one_loop().told(fix="resume it", limits={"timeout": 60}, queue_place=2)
    assert told.fix == "resume it" and told.queue_place == 2
    assert "fix" not in told.to_json() and "limits" not in told.to_json()
    assert told.to_json() == one_loop().to_json()


def test_a_setting_shown_as_its_own_field_comes_after_the_documented_ones() -> None:
    fields_of_one = {**one_loop().as_loop(), "max_widgets": 3}
    shown = LoopObject.from_fields(fields_of_one)
    assert shown.own == {"max_widgets": 3}
    assert list(shown.to_json())[-2:] == ["max_widgets", "version"]


def test_results_are_frozen() -> None:
    with pytest.raises(AttributeError):
        Notes("a", "", 0, False, False).notes = "forged"  # type: ignore[misc]
