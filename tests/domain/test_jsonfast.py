"""loopctl.fast.jsonfast: `json.loads`/`json.dumps` from `_json`, without
importing `json` (whose import compiles six patterns) on the run path. Its
answers and its errors must be `json`'s own."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from run_path_support import loaded_after_the_run_path

from loopctl.fast import jsonfast


def outcome(call: Any, *args: Any, **options: Any) -> str:
    try:
        return repr(("ok", call(*args, **options)))
    except Exception as exc:  # noqa: BLE001 - the very error is compared
        return repr(("error", type(exc), str(exc)))


def generated(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randint(0, 9 if depth < 4 else 5)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randint(-10**20, 10**20)
    if kind == 2:
        return rng.choice([0.1, -2.5e300, 1e-7, float("nan"), float("inf"), -0.0, 3.0])
    if kind <= 5:
        return "".join(rng.choice('ab"\\\n\u00e9\u2028\ud800 ') for _ in range(rng.randint(0, 5)))
    if kind <= 7:
        return [generated(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if kind == 8:
        return tuple(generated(rng, depth + 1) for _ in range(rng.randint(0, 3)))
    return {rng.choice(["z", "a", "é", ""]) + str(n): generated(rng, depth + 1)
            for n in range(rng.randint(0, 4))}


DUMPS_OPTIONS = [{}, {"indent": 2, "sort_keys": True, "allow_nan": False}, {"indent": 2},
                 {"sort_keys": True, "allow_nan": False, "separators": (",", ":")},
                 {"ensure_ascii": True}, {"indent": 2, "default": str}]


def test_dumps_writes_what_json_writes() -> None:
    rng = random.Random(40)
    values = [generated(rng) for _ in range(3000)]
    values += [{1: 2}, {"a": {1}}, [object()], {"b": [1, {"c": float("nan")}]}, "x", [], {}]
    for value in values:
        for options in DUMPS_OPTIONS:
            assert outcome(jsonfast.dumps, value, **options) == \
                outcome(json.dumps, value, **options), (value, options)
    looped: list[Any] = []
    looped.append(looped)
    for options in DUMPS_OPTIONS:
        assert outcome(jsonfast.dumps, looped, **options) == \
            outcome(json.dumps, looped, **options), options


@pytest.mark.parametrize("text", [
    '{"a": 1, "b": [1.5, -2e10, null, true, "x\\u00e9\\ud800"]}', "  [1, 2]  ", "[1] x", "",
    " ", "NaN", "[Infinity, -Infinity]", '{"a":', '"\\ufeff"', "\ufeff[1]", "[1,]",
    '{"a":1,"a":2}', "1e400", "-0", '"\x01"', "[" * 10 + "]" * 10, "nul"])
def test_loads_reads_what_json_reads_and_fails_as_it_does(text: str) -> None:
    for given in (text, text.encode("utf-8", "surrogatepass"), text.encode("utf-16"),
                  bytearray(text.encode("utf-8", "surrogatepass"))):
        assert outcome(jsonfast.loads, given) == outcome(json.loads, given), given
        assert outcome(jsonfast.loads, given, parse_constant=len) == \
            outcome(json.loads, given, parse_constant=len), given
    with pytest.raises(jsonfast.JSONDecodeError):  # json's, named here
        jsonfast.loads("{")


def test_the_run_path_does_not_import_json() -> None:
    then = ("from loopctl.fast import jsonfast\nfrom loopctl.storage import statefile\n"
            "text = jsonfast.dumps({'b': [1, {'c': None}]}, indent=2, sort_keys=True)\n"
            "assert jsonfast.loads(text) == {'b': [1, {'c': None}]}\n"
            "assert statefile.encode_state({'version': 1}, {'x': {'a': 1}})\n")
    assert loaded_after_the_run_path(then, ["json"]) == ["False"]
