"""The run record as a typed record (domain/run_record.py, issue 52 item 2):
built field by field in the order a run writes them, read back cleaned as
`history` shows it, and nothing a newer loopctl wrote lost on the way."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopctl.domain.records import FIELDS, clean_record
from loopctl.domain.run_record import MAX_EXTRA_KEYS, RunRecord
from loopctl.fast.data_class import fields
from loopctl.storage.atomic import strict_json

RUN = "20261130T031500Z-0007"
FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                max_size=4),
    max_leaves=20)


def test_the_class_has_a_field_for_every_key_the_schema_names() -> None:
    assert {"keys", "extra"}.isdisjoint(FIELDS)
    names = set(fields(RunRecord)) - {"keys", "extra"}
    assert names == set(FIELDS)


def test_a_built_record_has_the_keys_it_was_given_in_their_order() -> None:
    built = RunRecord.new(RUN, "x", iteration=2, outcome="ok", note=None)
    built.add(exit_code=0).add(note="said later", status_after="active")
    # `note` keeps its place: the settle step fills in a key the run wrote.
    assert list(built.to_json()) == ["version", "run_id", "loop", "iteration", "outcome",
                                     "note", "exit_code", "status_after"]
    assert built.to_json()["note"] == "said later" and built.note == "said later"
    assert built.to_json()["version"] == 1 and built.duration_s is None


def test_a_field_outside_the_schema_is_refused_when_built() -> None:
    with pytest.raises(ValueError, match="bogus"):
        RunRecord.new(RUN, "x", bogus=1)
    with pytest.raises(ValueError, match="keys"):  # the record's own bookkeeping, not a key
        RunRecord.new(RUN, "x").add(keys=["x"])


@FAST
@given(json_values)
def test_read_is_the_cleaned_record_fields_and_all(data: Any) -> None:
    read = RunRecord.from_json(data, RUN)
    clean = clean_record(data, RUN)
    cleaned, shown = clean.to_json(), read.to_json()
    assert {k: shown[k] for k in cleaned} == cleaned
    assert list(shown)[:len(cleaned)] == list(cleaned)  # history's keys, in history's order
    assert all(getattr(read, key) == getattr(clean, key) for key in clean.keys)
    strict_json(shown)


def test_reading_then_writing_loses_what_a_newer_loopctl_wrote() -> None:
    written = RunRecord.new(RUN, "x", outcome="ok", exit_code=0).to_json()
    newer = {**written, "reviewer": {"name": "ada", "votes": [1, 2]}, "tokens_in": 5}
    again = RunRecord.from_json(newer, RUN).to_json()
    assert again["reviewer"] == {"name": "ada", "votes": [1, 2]} and again["tokens_in"] == 5
    assert list(again)[-2:] == ["reviewer", "tokens_in"]
    assert RunRecord.from_json(again, RUN).to_json() == again  # and stays so


def test_a_hostile_file_cannot_plant_keys_without_bound() -> None:
    """The folder is agent-writable: keys that are no names, or a flood of
    them, are not carried into what history shows."""
    planted: dict[str, Any] = {"run_id": RUN, "outcome": "ok", "": 1, "x" * 65: 1,
                               "bad\nkey": 1, "keys": ["outcome"], "extra": {"a": 1}}
    planted.update({f"k{n}": n for n in range(MAX_EXTRA_KEYS + 50)})
    read = RunRecord.from_json(planted, RUN)
    assert len(read.extra) == MAX_EXTRA_KEYS
    assert not {"", "x" * 65, "bad\nkey", "keys", "extra"} & set(read.extra)
    assert read.to_json()["outcome"] == "ok" and read.keys[:2] == ["version", "run_id"]


def test_a_planted_infinity_is_not_carried_into_history() -> None:
    """Python's JSON reader takes `Infinity` and `NaN`: such a key of a
    "newer loopctl" would make every `history --json` fail to print."""
    import json

    text = '{"run_id": "RUN", "outcome": "ok", "big": Infinity, "deep": {"x": [NaN]}, "fine": 1.5}'
    planted = json.loads(text.replace("RUN", RUN))
    shown = RunRecord.from_json(planted, RUN).to_json()
    assert "big" not in shown and "deep" not in shown and shown["fine"] == 1.5
    strict_json(shown)
