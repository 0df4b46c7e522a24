"""The run record's parts as typed records (domain/run_parts.py, issue 52
item 2): each written by a run gives the bytes main wrote, key for key and
in the same order; each read back from those bytes gives them again; a
hostile value in a file, a state entry or a store row is refused field by
field. The JSON texts below are what main's functions returned for the same
inputs (json.dumps, keys unsorted, as `--json` prints them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loopctl.domain import protect, verify
from loopctl.domain.feedback import Check, Plan
from loopctl.domain.records import clean_record
from loopctl.domain.run_parts import CheckRecord, GateRecord, KeptCheck, PlanRecord
from loopctl.domain.run_record import RunRecord
from loopctl.domain.state_rules import SCHEMA
from loopctl.domain.untrusted import INVALID
from loopctl.engine.events import handoff_summary
from loopctl.engine.run_context import Gate

RUN = "20261201T030000Z-0001"
BRANCH = f"loopctl/x/{RUN}"


def text(part: Any) -> str:
    return json.dumps(part.to_json())


# -- check ---------------------------------------------------------------------------

CHECKS = [
    ((0, 1.23456, "ok\n", 7.5),
     '{"exit_code": 0, "passed": true, "duration_s": 1.235, "output_tail": "ok\\n", '
     '"metric": 7.5}'),
    ((None, 0.0, "", None, "check cannot start\npytst: not found"),
     '{"exit_code": null, "passed": false, "duration_s": 0.0, "output_tail": "", '
     '"metric": null, "why": "check cannot start pytst: not found"}'),
    ((1, 2.0, "x" * 5000, None),
     '{"exit_code": 1, "passed": false, "duration_s": 2.0, "output_tail": "'
     + "x" * verify.TAIL + '", "metric": null}'),
]


@pytest.mark.parametrize(("made", "main"), CHECKS)
def test_a_check_is_written_and_read_back_as_main_wrote_it(made: tuple[Any, ...],
                                                            main: str) -> None:
    written = verify.check_record(*made)
    assert text(written) == main
    read = CheckRecord.from_json(json.loads(main))
    assert read == written and text(read) == main


@pytest.mark.parametrize(("hostile", "kept"), [
    ({"passed": "yes", "exit_code": 0}, None),  # not a check at all: the record is damaged
    ("passed", None),
    ({"passed": True, "exit_code": float("nan"), "metric": float("inf"),
      "duration_s": -1, "output_tail": "x" * (64 * 1024)},
     CheckRecord(None, True, None, "", None)),
    ({"passed": False, "exit_code": 1, "why": "only without an exit code"},
     CheckRecord(1, False, None, "", None)),
    ({"passed": False, "why": "w" * 201}, CheckRecord(None, False, None, "", None)),
])
def test_a_hostile_check_is_refused_field_by_field(hostile: Any,
                                                   kept: CheckRecord | None) -> None:
    assert CheckRecord.from_json(hostile) == kept


def test_a_damaged_check_is_named_in_the_record() -> None:
    record = clean_record({"run_id": RUN, "outcome": "ok", "check": {"passed": 1}}, RUN)
    assert record.check is None and record.damaged == ["check"]


# -- gate ----------------------------------------------------------------------------

def test_a_gate_is_written_and_read_back_as_main_wrote_it() -> None:
    main = '{"exit_code": 0, "output_tail": "out\\n"}'
    written = Gate(["true"], 0, None, "out\n", 0.1).record()
    assert text(written) == main
    assert text(GateRecord.from_json(json.loads(main))) == main


def test_a_hostile_gate_is_refused_field_by_field() -> None:
    assert GateRecord.from_json(["exit_code", 0]) is None
    assert GateRecord.from_json({"exit_code": "0", "output_tail": 7}) == GateRecord(None, "")
    assert GateRecord.from_json({"exit_code": 1e12}) == GateRecord(None, "")
    record = clean_record({"run_id": RUN, "outcome": "ok", "gate": "open"}, RUN)
    assert record.gate is None and record.damaged == ["gate"]


# -- last_check, in state.json ---------------------------------------------------------

KEPT = [
    ((1, 1, "", 3.0),
     '{"run_id": "20261201T030000Z-0001", "exit_code": 1, "passed": false, "metric": 3.0}'),
    ((None, 1, "", None, "timed out"),
     '{"run_id": "20261201T030000Z-0001", "exit_code": null, "passed": false, '
     '"metric": null, "why": "timed out"}'),
]


@pytest.mark.parametrize(("made", "main"), KEPT)
def test_the_kept_check_is_written_and_read_back_as_main_wrote_it(made: tuple[Any, ...],
                                                                  main: str) -> None:
    written = verify.last_check(RUN, verify.check_record(*made))
    assert text(written) == main
    assert text(KeptCheck.from_json(json.loads(main))) == main
    # What state.json's rule keeps of it (domain/state_rules) is the same.
    assert json.dumps(SCHEMA["last_check"].rule(json.loads(main))) == main


@pytest.mark.parametrize("hostile", [
    {"run_id": "../x", "exit_code": 0, "passed": True, "metric": None},
    {"run_id": RUN, "exit_code": 3, "passed": True, "metric": None},  # passed of a 3
    {"run_id": RUN, "exit_code": 0, "passed": "yes", "metric": None},
    {"run_id": RUN, "exit_code": -1, "passed": False, "metric": None},
    {"run_id": RUN, "exit_code": 1, "passed": False, "metric": float("inf")},
])
def test_a_hostile_kept_check_is_refused(hostile: dict[str, Any]) -> None:
    assert KeptCheck.from_json(hostile) is None
    assert SCHEMA["last_check"].rule(hostile) is INVALID


def test_a_hand_edited_why_becomes_one_plain_line() -> None:
    kept = KeptCheck.from_json({"run_id": RUN, "exit_code": None, "passed": False,
                                "metric": None, "why": "a\x1b[2J\nb" + "c" * 300})
    assert kept is not None and kept.why == "a b" + "c" * 197


# -- pr_feedback -----------------------------------------------------------------------

PLAN_WRITTEN = ('{"pr": "https://github.com/o/r/pull/7", "action": "continue", '
                '"why": "checks failed: ci", "failed_checks": ["ci"], "attempt": 2, "of": 3, '
                f'"branch": "{BRANCH}", "note": "a note"}}')
# `history` has always shown a read-back `pr_feedback` in another order.
PLAN_READ = ('{"pr": "https://github.com/o/r/pull/7", "why": "checks failed: ci", '
             f'"branch": "{BRANCH}", "note": "a note", "action": "continue", "attempt": 2, '
             '"of": 3, "failed_checks": ["ci"]}')


def test_a_fix_runs_plan_is_written_and_read_back_as_main_wrote_it() -> None:
    plan = Plan("continue", "https://github.com/o/r/pull/7", BRANCH, "checks failed: ci",
                [Check("ci", "fail")], 2, 3, {}, "a note")
    assert text(plan.record()) == PLAN_WRITTEN
    assert text(PlanRecord.from_json(json.loads(PLAN_WRITTEN))) == PLAN_READ
    assert text(PlanRecord.from_json(json.loads(PLAN_READ))) == PLAN_READ
    review = Plan("review", "u", "b", "why")
    assert text(review.record()) == '{"pr": "u", "action": "review", "why": "why"}'
    assert text(PlanRecord.from_json(review.record().to_json())) == \
        '{"pr": "u", "why": "why", "action": "review"}'


def test_a_hostile_plan_is_refused_field_by_field() -> None:
    assert PlanRecord.from_json({"action": "rm -rf /", "pr": "u"}) is None
    assert PlanRecord.from_json("continue") is None
    read = PlanRecord.from_json({"action": "continue", "pr": 7, "attempt": -1, "of": True,
                                 "why": "w" * 4001, "failed_checks": ["ci", 3, "x" * 401]})
    assert read is not None and read.to_json() == {"action": "continue", "failed_checks": ["ci"]}
    record = clean_record({"run_id": RUN, "outcome": "ok", "pr_feedback": {}}, RUN)
    assert record.pr_feedback is None and record.damaged == ["pr_feedback"]


# -- protected paths, the hand-off and --until-check's decision ------------------------

def test_the_protected_paths_are_written_as_main_wrote_them() -> None:
    found = protect.record_fields(["b.py", "a\x1b[2J.py"])
    assert (found.protected, found.count) == (["b.py", "a.py"], None)
    many = protect.record_fields([f"t{i}.py" for i in range(101)])
    assert len(many.protected) == protect.RECORDED and many.count == 101


def test_the_handoff_summary_is_what_main_kept() -> None:
    summary = handoff_summary({"handoff": "pushed", "branch": "loopctl/x/r", "commits": 2,
                               "pr_url": None, "merged": False, "base": "main"})
    assert text(summary) == ('{"handoff": "pushed", "branch": "loopctl/x/r", "commits": 2, '
                             '"merged": false}')


def test_a_passing_check_decides_as_main_decided() -> None:
    class Loop:
        until_check, check = True, ("pytest", "-q")

    said = {"decision": "complete", "summary": "s", "evidence": "e"}
    decided = verify.by_check(Loop, verify.check_record(0, 1, "", 4.0), said)
    assert text(decided) == ('{"decision": "complete", "summary": "s", '
                             '"evidence": "`pytest -q` exited 0 (metric 4)", "source": "check"}')
    assert verify.by_check(Loop, verify.check_record(1, 1, "", 4.0), said) is None


# -- the parts in a whole record -------------------------------------------------------

# What main wrote for a record with every part (line 1) and what `history
# --json` showed of it read back (line 2), made by main's RunRecord from the
# same values as below.
WHOLE = Path(__file__).parent.parent / "samples" / "run_record_parts.txt"


def test_a_record_with_every_part_is_written_and_read_back_as_main_did() -> None:
    written_by_main, read_by_main = WHOLE.read_text().splitlines()
    plan = Plan("continue", "https://github.com/o/r/pull/7", BRANCH, "checks failed: ci",
                [Check("ci", "fail")], 2, 3, {}, None)
    made = RunRecord.new(RUN, "x", outcome="failed", exit_code=0)
    found = protect.record_fields(["tests/a.py"])
    made.add(gate=Gate(["true"], 0, None, "", 0.1).record(),
             check=verify.check_record(1, 1.0, "2 red\n", None), pr_feedback=plan.record(),
             protected=found.protected)
    assert json.dumps(made.to_json()) == written_by_main
    read = RunRecord.from_json(json.loads(written_by_main), RUN)
    assert json.dumps(read.to_json()) == read_by_main
    assert isinstance(read.check, CheckRecord) and read.check.output_tail == "2 red\n"
    assert isinstance(read.pr_feedback, PlanRecord) and read.pr_feedback.attempt == 2
