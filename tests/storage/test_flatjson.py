"""The fast path's reader of `summary.json` (loopctl/fast/flatjson.py)
may refuse what it does not know, but never read a text differently from a
real JSON parser: whatever it returns is exactly what `json.loads` gives."""

from __future__ import annotations

import json

from hypothesis import example, given
from hypothesis import strategies as st

from loopctl.fast import flatjson

HEX = st.text(alphabet="0123456789abcdef", max_size=64)
FINITE = st.floats(allow_nan=False, allow_infinity=False)
VALUES = st.one_of(st.none(), st.booleans(), st.integers(), FINITE, HEX,
                   st.lists(st.one_of(st.integers(), FINITE), max_size=4))
SHAPED = st.dictionaries(st.text(alphabet="abcdefghij_", min_size=1, max_size=12), VALUES,
                         max_size=8)


@given(SHAPED)
def test_what_the_store_writes_is_read_back_exactly(summary: dict[str, object]) -> None:
    compact = json.dumps(summary, sort_keys=True, separators=(",", ":"), allow_nan=False)
    assert flatjson.parse(compact) == summary
    assert flatjson.parse(json.dumps(summary, indent=2)) == summary


@given(st.text(alphabet='{}[]":,. -+0123456789eEtrufalsn\\x\n', max_size=60))
@example('{"a":01}')
@example('{"a":1,}')
@example('{"a":1e999}')
@example('{"a":NaN}')
@example('{"a":"\\u0041"}')
@example('{"a":1,"a":2}')
@example('{"a":[1,]}')
@example('{"a":-}')
@example('{"a":.5}')
@example('{"a":+1}')
@example('{"a":tru}')
def test_it_refuses_or_agrees_with_json(text: str) -> None:
    parsed = flatjson.parse(text)
    if parsed is None:
        return
    assert parsed == json.loads(text)
    assert '"a":1,"a":2' not in text  # duplicate keys are refused, not last-wins


def test_odd_shapes_are_refused() -> None:
    for text in ('[]', '{"a":{"b":1}}', '{"a":["x"]}', '{"a":"b\\"c"}', '{"a":1} x',
                 '{"a":1e999}', '{"busy":01}', ""):
        assert flatjson.parse(text) is None, text
