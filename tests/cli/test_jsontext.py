"""`--json` output: `loopctl.fast.jsontext.dumps` prints exactly what
`json.dumps(data, indent=2, default=str, allow_nan=False)` prints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CLI, in_process
from loopctl.fast import jsontext


def standard(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False, default=str, allow_nan=False)


# Text that includes the placeholder jsontext uses inside, escapes, line
# separators and non-ASCII: nothing the data holds may be confused with it.
TEXT = st.one_of(st.text(max_size=8), st.sampled_from(
    [jsontext._HOLE, "\x00", "a\u2028b", "\n", '"', "\\", "é", "🙂", "{", "]"]))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), TEXT,
                    st.floats(allow_nan=False, allow_infinity=False))
KEYS = st.one_of(TEXT, st.integers(), st.booleans(), st.none(),
                 st.floats(allow_nan=False, allow_infinity=False))
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=5),
                            st.lists(inner, max_size=3).map(tuple),
                            st.dictionaries(KEYS, inner, max_size=5)),
    max_leaves=30)


# 150 generated values; test_edges below holds the shapes that matter.
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(VALUES)
def test_the_same_text_as_the_standard_library(data: Any) -> None:
    assert jsontext.dumps(data) == standard(data)


# Lists of records sharing their keys (`ls --json`), written a column at a
# time: cells are scalars, flat containers (empty ones too) or, now and
# then, something deeper that the column path must leave to the walk.
FLAT = st.one_of(st.lists(SCALARS, max_size=3), st.lists(SCALARS, max_size=2).map(tuple),
                 st.dictionaries(TEXT, SCALARS, max_size=3))
CELLS = st.one_of(SCALARS, FLAT, st.just({"deep": {"x": [1]}}), st.just([[1, "},\n  {"]]))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(TEXT, min_size=1, max_size=5, unique=True).flatmap(
    lambda keys: st.lists(st.one_of(st.fixed_dictionaries({k: CELLS for k in keys}),
                                    st.just({}), st.just({"other": 1})),
                          min_size=2, max_size=8)))
def test_records_with_the_same_keys_are_written_as_the_standard_library_does(
        records: list[dict[str, Any]]) -> None:
    assert jsontext.dumps({"loops": records}) == standard({"loops": records})
    assert jsontext.dumps(records) == standard(records)


@pytest.mark.parametrize("data", [
    {}, [], (), {"a": {}}, {"a": [[]]}, [{"a": 1}, {"b": [1, 2]}, []],
    {"loops": [{"name": "x", "schedule": {"every_s": 60}, "command": ["true"], "notify": []}]},
    {"a": {"b": {"c": {"d": [1, {"e": None}]}}}},
    {"a": Path("/tmp/x"), "b": [Path("/y")]},  # default=str
    {7: "int key", 2.5: "float key", True: "bool key", None: "null key"},
    {"hole": jsontext._HOLE, "nested": {"x": jsontext._HOLE}},
    [{"a": "},\n    {", "b": {"c": "],\n      ["}}, {"a": "\x01", "b": {"c": "]\x01["}}],
    [{"a": [1], "b": {}}, {"a": (), "b": {"x": None}}, {"a": ("t",), "b": {}}],
    [{"a": [1]}, {"a": {"b": 2}}],  # one column, two kinds of container
    # Equal but written differently: a column is written once only when
    # every cell reads the same.
    [{"a": 1}, {"a": True}], [{"a": 0.0}, {"a": -0.0}], [{"a": 0}, {"a": 0.0}],
    [{"a": {"x": 1}}, {"a": {"x": True}}], [{"a": [0.0]}, {"a": [-0.0]}],
    [{"a": [1], "b": 2}, {"a": (1,), "b": 2}], [{"a": {"d": {"e": 1}}}, {"a": {"d": {"e": 1}}}],
    [{"a": Path("/x")}, {"a": Path("/x")}],
], ids=repr)
def test_edges(data: Any) -> None:
    assert jsontext.dumps(data) == standard(data)


@pytest.mark.parametrize("data", [float("nan"), {"a": [float("inf")]}, [{"b": -float("inf")}],
                                  {(1, 2): 3}, {"a": {(1,): 2}}], ids=repr)
def test_what_json_refuses_is_refused(data: Any) -> None:
    with pytest.raises((ValueError, TypeError)) as std:
        standard(data)
    with pytest.raises(std.type):
        jsontext.dumps(data)


def test_ls_json_prints_the_standard_text(cli: CLI) -> None:
    cli("start", "--name", "one", "--every", "1h", "--command", "true", "the prompt")
    cli("start", "--name", "two", "--cron", "*/5 * * * *", "--command", "true", "p")
    proc = in_process("ls", "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == standard(json.loads(proc.stdout)) + "\n"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(TEXT, max_size=5, unique=True).flatmap(
    lambda keys: st.lists(st.fixed_dictionaries({k: CELLS for k in keys}), max_size=6)))
def test_a_table_is_written_as_its_rows_are(records: list[dict[str, Any]]) -> None:
    """`Table` (records given a field at a time) prints what the list of
    its rows prints."""
    keys = list(records[0]) if records else []
    records = [{k: r[k] for k in keys} for r in records]
    columns = [[r[k] for r in records] for k in keys]
    table = jsontext.Table(keys, columns, len(records))
    assert table.rows() == records
    assert jsontext.dumps({"loops": table, "version": 1}) == standard(
        {"loops": records, "version": 1})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(TEXT, min_size=1, max_size=5, unique=True).flatmap(
    lambda keys: st.tuples(st.just(keys), st.fixed_dictionaries({k: CELLS for k in keys}),
                           st.lists(st.booleans(), min_size=len(keys), max_size=len(keys)),
                           st.integers(2, 5))))
def test_a_column_said_to_hold_one_object_is_written_as_its_rows_are(
        case: tuple[list[str], dict[str, Any], list[bool], int]) -> None:
    """A column the caller made one object in every cell (`same`) is
    written once, and the text is still that of its rows."""
    keys, first, same, count = case
    columns = [[first[k]] * count if alike else [first[k], *[None] * (count - 1)]
               for k, alike in zip(keys, same, strict=True)]
    table = jsontext.Table(keys, columns, count, same)
    assert jsontext.dumps({"loops": table}) == standard({"loops": table.rows()})


@pytest.mark.parametrize("cells", [
    [{"a": [1]}, {"a": [True]}],
    [{"a": [[1.0]]}, {"a": [[1]]}],
    [{"a": 1, "b": 2}, {"b": 2, "a": 1}],
    [[{"a": 0.0}], [{"a": -0.0}]],
], ids=["int-bool-inside", "float-int-deeper", "key-order", "zero-sign-inside"])
def test_equal_cells_written_apart_are_written_apart(cells: list[Any]) -> None:
    """Equal containers whose insides JSON writes apart (a type, a sign, the
    order of keys) are each written as they are."""
    table = jsontext.Table(["x"], [cells], len(cells))
    assert jsontext.dumps({"loops": table}) == standard({"loops": table.rows()})

