"""Unit and property tests for the checks at loopctl's trust boundaries
(DESIGN §11): decision files, agent readings, state entries, run records,
names, run ids, environment numbers and YAML aliases. Pure: no processes."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest
from fixed_zone import zone_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopctl.agents.presets import build_argv
from loopctl.agents.readers import READERS, Reading, sanitized
from loopctl.domain.errors import UnreadableError, UsageError
from loopctl.domain.model import NAME_RE, parse_loop
from loopctl.domain.names import is_loop_name, is_run_id
from loopctl.domain.records import clean_record
from loopctl.domain.state import SCHEMA, LoopState, new_loop_state, repair, repair_all
from loopctl.domain.untrusted import INVALID, MAX_DECISION_BYTES, read_decision
from loopctl.settings import env_number
from loopctl.storage.atomic import strict_json
from loopctl.storage.paths import Paths
from loopctl.storage.yamlio import parse_yaml_text

# 100 generated examples on top of the explicit cases above each property
# (every CI run draws new ones); 200 cost ~1.4 s more of CPU a run.
FAST = settings(max_examples=100, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])
NOW = 1_780_000_000.0

# Any JSON value, including the non-finite numbers Python's parser admits.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                max_size=4),
    max_leaves=20)


# -- decision files ------------------------------------------------------------------


def decision_bytes(**fields: Any) -> bytes:
    return json.dumps({"version": 1, **fields}).encode()


@pytest.mark.parametrize("delay", [math.nan, math.inf, -math.inf, 1e308, -5, "soon", [1],
                                   {"a": 1}, True])
def test_a_bad_next_delay_is_dropped_and_the_decision_kept(delay: Any) -> None:
    decision, notes = read_decision(decision_bytes(decision="continue", next_delay_s=delay))
    assert decision is not None and decision["decision"] == "continue"
    assert decision["next_delay_s"] is None
    assert len(notes) == 1 and "next_delay_s" in notes[0] and "dropped" in notes[0]


def test_a_good_decision_passes_whole() -> None:
    decision, notes = read_decision(decision_bytes(decision="continue", summary="s",
                                                   evidence="e", next_delay_s=90))
    assert decision == {"version": 1, "decision": "continue", "summary": "s",
                        "evidence": "e", "next_delay_s": 90.0}
    assert notes == []


@pytest.mark.parametrize(("data", "why"), [
    (b"[]", "expected a JSON object"),
    (b'"complete"', "expected a JSON object"),
    (b"42", "expected a JSON object"),
    (b"{not json", "not valid JSON"),
    (b"\xff\xfe{}", "not UTF-8"),
    (b"[" * 60_000, "not valid JSON"),
    (decision_bytes(decision="explode"), "unknown decision"),
    (decision_bytes(decision=1), "unknown decision"),
    (decision_bytes(decision="complete", summary="x" * MAX_DECISION_BYTES), "larger than"),
])
def test_an_unusable_decision_file_is_ignored_with_a_reason(data: bytes, why: str) -> None:
    decision, notes = read_decision(data)
    assert decision is None
    assert len(notes) == 1 and why in notes[0]


@pytest.mark.parametrize("text", ["x" * 4001, ["a"], {"b": 1}, 3, "\ud800"])
def test_bad_summary_and_evidence_are_dropped(text: Any) -> None:
    raw = json.dumps({"decision": "block", "summary": text, "evidence": text}).encode()
    decision, notes = read_decision(raw)
    assert decision is not None and decision["decision"] == "block"
    assert decision["summary"] is None and decision["evidence"] is None
    assert [n.split()[1] for n in notes] == ["summary", "evidence"]


@FAST
@given(json_values)
def test_any_decision_file_gives_a_storable_decision(value: Any) -> None:
    data = json.dumps({"decision": "continue", "summary": value, "evidence": value,
                       "next_delay_s": value}).encode()
    decision, _ = read_decision(data)
    assert decision is not None
    strict_json(decision)  # raises on NaN/inf


# -- agent readings ----------------------------------------------------------------


@pytest.mark.parametrize("sid", ["--dangerously-skip-permissions", "-x", "a b", "../../etc",
                                 "s" * 10_000, "$(touch pwned)", "", "id\nnext", 42])
def test_a_bad_session_id_is_dropped(sid: Any) -> None:
    reading = sanitized(Reading(session_id=sid), NOW)
    assert reading.session_id is None


@pytest.mark.parametrize("sid", ["3f2b1c0e-8d4a-4c1e-9b7a-2f5e6d7c8b9a", "thread_abc.1:2",
                                 "ses_01HZX"])
def test_a_good_session_id_is_kept(sid: str) -> None:
    assert sanitized(Reading(session_id=sid), NOW).session_id == sid


@pytest.mark.parametrize("cost", [math.nan, math.inf, -1.0, 1e300, "0.5", True, 10**400])
def test_a_bad_cost_is_dropped_with_a_note(cost: Any) -> None:
    reading = sanitized(Reading(cost_usd=cost), NOW)
    assert reading.cost_usd is None
    assert any("cost" in note and "dropped" in note for note in reading.notes)


def test_a_reset_time_beyond_a_week_is_dropped() -> None:
    assert sanitized(Reading(reset_at=NOW + 3600), NOW).reset_at == NOW + 3600
    assert sanitized(Reading(reset_at=1e300), NOW).reset_at is None
    assert sanitized(Reading(reset_at=math.nan), NOW).reset_at is None


@pytest.mark.parametrize("cost", ["NaN", "Infinity", "-1", "1e300", '"0.5"', "true"])
def test_the_claude_reader_never_reports_a_bad_cost(cost: str) -> None:
    line = ('{"type":"result","subtype":"success","is_error":false,"result":"done",'
            f'"session_id":"--yolo","total_cost_usd":{cost}}}\n').encode()
    reading = READERS["claude"](b"", line, 0)
    assert reading.cost_usd is None and reading.session_id is None
    assert reading.result_text == "done"


def test_a_lone_surrogate_in_a_result_becomes_printable() -> None:
    line = b'{"type":"result","result":"bad \\ud800 text","session_id":"abc"}\n'
    reading = READERS["claude"](b"", line, 0)
    assert reading.result_text is not None
    reading.result_text.encode("utf-8")  # printable on a UTF-8 terminal


def test_a_flag_shaped_session_never_reaches_argv() -> None:
    loop = parse_loop("x", {"prompt": "p", "every": "1h", "agent": "claude",
                            "continue_session": True})
    argv, _ = build_argv(loop, "p", "/f", "20261130T031500Z-0001",
                         resume_session="--dangerously-skip-permissions")
    assert "--dangerously-skip-permissions" not in argv and "--resume" not in argv
    argv, _ = build_argv(loop, "p", "/f", "20261130T031500Z-0001", resume_session="abc-1")
    assert argv[argv.index("--resume") + 1] == "abc-1"


# -- state entries -----------------------------------------------------------------


def fresh_entry() -> LoopState:
    loop = parse_loop("x", {"prompt": "p", "every": "1h"})
    return new_loop_state(loop, NOW, zone=zone_of(loop))


def test_a_sane_entry_passes_unchanged() -> None:
    entry = fresh_entry()
    clean, bad = repair("x", json.loads(json.dumps(vars(entry))))
    assert bad == [] and clean == entry


@pytest.mark.parametrize(("key", "value"), [
    ("next_due", math.nan), ("next_due", "soon"), ("deadline", 1e308), ("created", -1e308),
    ("iterations", "3"), ("iterations", -1), ("run", 5), ("run", {"run_id": "../../x"}),
    ("outcomes", "x"), ("session_id", "--yolo"), ("cost_usd", math.nan),
    ("status", "bogus"), ("orphan", {"pid": 1, "ct": 0.0}), ("after_run", "explode"),
])
def test_a_bad_field_is_reset_and_pauses_the_loop(key: str, value: Any) -> None:
    entry = vars(fresh_entry())  # its fields, as an untrusted file holds them
    entry[key] = value
    clean, bad = repair("x", entry)
    assert bad == [key]
    assert getattr(clean, key) == SCHEMA[key].repaired or key == "status"
    assert (clean.status, clean.reason) == ("paused", "error")
    assert key in clean.note and "loopctl resume x" in clean.note
    strict_json(clean.to_json())


def test_a_terminal_loop_stays_terminal_when_repaired() -> None:
    entry = dict(vars(fresh_entry()), status="completed", iterations="many")
    clean, bad = repair("x", entry)
    assert bad == ["iterations"] and clean.status == "completed"


def test_entries_under_names_start_would_refuse_are_dropped() -> None:
    loops = {"../x": vars(fresh_entry()), "ok": vars(fresh_entry()), "": {}, "-rf": {}}
    clean, problems = repair_all(loops)
    assert list(clean) == ["ok"]
    assert set(problems) == {"../x", "", "-rf"}


@FAST
@given(st.dictionaries(st.sampled_from(sorted(SCHEMA)), json_values, max_size=8)
       | json_values)
def test_any_damage_repairs_to_an_entry_that_passes_every_rule(damage: Any) -> None:
    entry = dict(vars(fresh_entry()), **damage) if isinstance(damage, dict) else damage
    clean, _ = repair("x", entry)
    again, bad = repair("x", clean)
    assert bad == [] and again == clean
    strict_json(clean.to_json())
    for key, field in SCHEMA.items():
        assert field.rule(getattr(clean, key)) is not INVALID, key


def test_the_typed_entry_the_schema_and_a_new_entry_name_the_same_fields() -> None:
    """One schema: a field added to the TypedDict but not to SCHEMA (or the
    other way round) would be built, or repaired, without a rule."""
    assert list(LoopState.__annotations__) == list(SCHEMA)
    assert list(vars(fresh_entry())) == list(SCHEMA)
    for key, field in SCHEMA.items():
        assert field.rule(field.initial) is not INVALID, key
        assert field.rule(field.repaired) is not INVALID, key


# -- run records --------------------------------------------------------------------

RUN = "20261130T031500Z-0007"


@FAST
@given(json_values)
def test_any_record_cleans_to_something_history_can_render(data: Any) -> None:
    record = clean_record(data, RUN).to_json()
    strict_json(record)
    assert record["run_id"] == RUN
    assert isinstance(record["outcome"], str)
    assert record["exit_code"] is None or isinstance(record["exit_code"], int)
    assert record["decision"] is None or isinstance(record["decision"], dict)


def test_a_clean_record_is_not_marked_damaged() -> None:
    record = {"version": 1, "run_id": RUN, "loop": "x", "outcome": "ok", "exit_code": 0,
              "duration_s": 1.5, "decision": {"decision": "complete", "summary": "s",
                                              "evidence": None}, "argv": ["a"]}
    cleaned = clean_record(record, RUN)
    assert cleaned.damaged is None
    assert cleaned.exit_code == 0 and cleaned.duration_s == 1.5


def test_a_damaged_record_names_its_bad_fields() -> None:
    cleaned = clean_record({"run_id": RUN, "outcome": "ok", "exit_code": math.nan,
                            "decision": "complete"}, RUN)
    assert cleaned.damaged == ["exit_code", "decision"]


# -- names and run ids ---------------------------------------------------------------

RUN_ID_RE = re.compile(r"[0-9]{8}T[0-9]{6}Z-[0-9]{4,9}")


@FAST
@given(st.text(alphabet="abz09._-/T Z\\\x00é", max_size=70))
def test_loop_name_check_agrees_with_the_documented_pattern(name: str) -> None:
    assert is_loop_name(name) == bool(NAME_RE.fullmatch(name))


@FAST
@given(st.from_regex(RUN_ID_RE, fullmatch=True) | st.text(alphabet="0123456789TZ-./", max_size=30))
def test_run_id_check_agrees_with_the_documented_pattern(run_id: str) -> None:
    assert is_run_id(run_id) == bool(RUN_ID_RE.fullmatch(run_id))


@pytest.mark.parametrize("name", ["..", "../x", "/etc", "a/b", ".hidden", "-rf", "", "A"])
def test_no_path_is_derived_from_a_bad_name(name: str, tmp_path: Any) -> None:
    paths = Paths(tmp_path, tmp_path / "state")
    with pytest.raises(UsageError, match="bad loop name"):
        paths.loop_runs_dir(name)


@pytest.mark.parametrize("run_id", ["..", "../../x", f"{RUN}/../../x", "/etc/passwd", ""])
def test_no_path_is_derived_from_a_bad_run_id(run_id: str, tmp_path: Any) -> None:
    paths = Paths(tmp_path, tmp_path / "state")
    with pytest.raises(UsageError, match="bad run id"):
        paths.run_log("ok", run_id)


# -- environment numbers -------------------------------------------------------------


@pytest.mark.parametrize("raw", ["abc", "nan", "inf", "-inf", "1e400", "-5", "99999"])
def test_a_bad_env_number_names_the_variable(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPCTL_TEST_KNOB", raw)
    with pytest.raises(UsageError, match="LOOPCTL_TEST_KNOB"):
        env_number("LOOPCTL_TEST_KNOB", 1.0, 0.0, 3600.0)


def test_an_unset_or_empty_env_number_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOOPCTL_TEST_KNOB", raising=False)
    assert env_number("LOOPCTL_TEST_KNOB", 7.0, 0.0, 10.0) == 7.0
    monkeypatch.setenv("LOOPCTL_TEST_KNOB", " ")
    assert env_number("LOOPCTL_TEST_KNOB", 7.0, 0.0, 10.0) == 7.0
    monkeypatch.setenv("LOOPCTL_TEST_KNOB", "2.5")
    assert env_number("LOOPCTL_TEST_KNOB", 7.0, 0.0, 10.0) == 2.5


# -- YAML ------------------------------------------------------------------------------


def alias_bomb(levels: int) -> str:
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, levels):
        refs = ",".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


def test_an_alias_is_refused_before_anything_walks_it() -> None:
    with pytest.raises(UnreadableError, match="aliases"):
        parse_yaml_text(alias_bomb(12), "f.yaml")


def test_a_single_alias_is_refused_with_its_line() -> None:
    with pytest.raises(UnreadableError, match=r"f.yaml, line \d+: .*aliases"):
        parse_yaml_text("a: &x 1\nb: *x\n", "f.yaml")


def test_an_anchor_without_an_alias_is_harmless() -> None:
    assert parse_yaml_text("a: &x 1\nb: 2\n", "f.yaml") == {"a": 1, "b": 2}


# -- every reader, every field it takes from the agent -------------------------------

HOSTILE_VALUES = ["NaN", "Infinity", "-Infinity", "1e308", "-1", '"0.5"', "true", "null",
                  '"--dangerously-skip-permissions"', '"-x"', '"a b"', '"../../etc"',
                  '"' + "s" * 10_000 + '"', '{"nested": [1, {"x": NaN}]}', "[[[[[[1]]]]]]",
                  '"bad \\ud800 surrogate"']


def reader_outputs(value: str) -> dict[str, tuple[bytes, bytes]]:
    """(head, tail) in each reader's format with `value` in every field it
    reads: session ids, costs, result text, errors."""
    def lines(*items: str) -> bytes:
        return ("\n".join(items) + "\n").encode()

    return {
        "claude": (b"", lines('{"type":"result","subtype":"success","is_error":false,'
                              f'"result":{value},"session_id":{value},'
                              f'"total_cost_usd":{value}}}')),
        "codex": (lines(f'{{"type":"thread.started","thread_id":{value}}}'),
                  lines(f'{{"type":"item.completed","item":{{"type":"agent_message",'
                        f'"text":{value}}}}}', '{"type":"turn.completed"}')),
        "gemini": (b"", lines(f'{{"session_id":{value},"response":{value},'
                              f'"stats":{value}}}')),
        "opencode": (lines(f'{{"type":"step_start","sessionID":{value}}}'),
                     lines(f'{{"type":"text","sessionID":{value},"part":{{"text":{value}}}}}')),
        "pi": (lines(f'{{"type":"session","id":{value}}}'),
               lines(f'{{"type":"agent_end","messages":[{{"role":"assistant",'
                     f'"content":{value},"usage":{{"cost":{{"total":{value}}}}}}}]}}')),
        "goose": (b"", lines(f'{{"messages":[{{"role":"assistant","content":{value}}}],'
                             f'"metadata":{{"cost_usd":{value},"status":{value}}}}}')),
        "copilot": (b"", lines(f'{{"type":"result","sessionId":{value},"result":{value}}}')),
    }


@pytest.mark.parametrize("value", HOSTILE_VALUES)
@pytest.mark.parametrize("reader", ["claude", "codex", "gemini", "opencode", "pi", "goose",
                                    "copilot"])
def test_no_reader_lets_a_hostile_value_through(reader: str, value: str) -> None:
    head, tail = reader_outputs(value)[reader]
    for exit_code in (0, 1):
        reading = READERS[reader](head, tail, exit_code)
        assert reading.session_id is None or (
            reading.session_id[0] != "-" and " " not in reading.session_id
            and "/" not in reading.session_id and len(reading.session_id) <= 128)
        assert reading.cost_usd is None or 0 <= reading.cost_usd <= 1_000_000
        assert reading.result_text is None or len(reading.result_text) <= 4000
        for text in (reading.result_text, reading.error):
            if text is not None:
                text.encode("utf-8")  # printable, storable
        strict_json({"session": reading.session_id, "cost": reading.cost_usd,
                     "result": reading.result_text, "error": reading.error,
                     "reset": reading.reset_at})


# -- the final-message decision channel ------------------------------------------------

from loopctl.domain.untrusted import decision_from_text  # noqa: E402


def test_the_last_decision_line_of_the_final_message_is_read() -> None:
    text = ('Did the work.\nLOOPCTL-DECISION: {"decision": "continue", "summary": "early"}\n'
            'More work.\n`LOOPCTL-DECISION: {"decision": "complete", "summary": "done", '
            '"evidence": "tests pass"}`\n')
    decision, notes = decision_from_text(text)
    assert decision == {"version": 1, "decision": "complete", "summary": "done",
                        "evidence": "tests pass", "next_delay_s": None}
    assert notes == []


@pytest.mark.parametrize(("next_value", "seconds"), [("20m", 1200.0), (90, 90.0),
                                                     ("soon", None), (math.inf, None)])
def test_next_on_the_decision_line_is_a_duration(next_value: Any, seconds: float | None
                                                 ) -> None:
    line = "LOOPCTL-DECISION: " + json.dumps({"decision": "continue", "next": next_value})
    decision, notes = decision_from_text(line)
    assert decision is not None and decision["next_delay_s"] == seconds
    assert bool(notes) == (seconds is None)


@pytest.mark.parametrize("text", [None, "", "no line here",
                                  'LOOPCTL-DECISION: {"decision": "<continue|complete>"}',
                                  "LOOPCTL-DECISION: not json", "LOOPCTL-DECISION: [1]"])
def test_no_usable_line_gives_no_decision(text: str | None) -> None:
    decision, _ = decision_from_text(text)
    assert decision is None


def test_the_envelopes_example_line_is_not_a_decision() -> None:
    from loopctl.agents.envelope import wrap

    loop = parse_loop("x", {"prompt": "p", "every": "1h", "agent": "claude"})
    text = wrap(loop, "objective", new_loop_state(loop, NOW, zone=zone_of(loop)), 1, NOW + 5)
    assert "LOOPCTL-DECISION:" in text
    assert decision_from_text(text)[0] is None  # an echoed prompt decides nothing


def test_decision_text_loses_terminal_escapes_and_is_one_line() -> None:
    raw = json.dumps({"decision": "complete", "summary": "ok \x1b[2J\x1b]0;t\x07done",
                      "evidence": "line 1\nline 2\tend"}).encode()
    decision, notes = read_decision(raw)
    assert decision is not None and notes == []
    assert decision["summary"] == "ok done"
    assert decision["evidence"] == "line 1 line 2 end"  # one field, one line (issue 25)


def test_a_record_field_outside_the_schema_is_refused_when_built() -> None:
    """One schema for what a run records and what `history` reads back: a
    builder that writes a field the reader does not know fails loudly."""
    from loopctl.domain.run_record import RunRecord

    built = RunRecord.new(RUN, "x", outcome="ok", exit_code=0, argv=["a"])
    assert clean_record(built.to_json(), RUN).damaged is None
    with pytest.raises(ValueError, match="bogus"):
        RunRecord.new(RUN, "x", outcome="ok", bogus=1)
    with pytest.raises(ValueError, match="bogus"):
        built.add(bogus=1)
