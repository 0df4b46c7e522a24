"""`--json` text: what `json.dumps(data, indent=2, default=str, allow_nan=False)`
prints, byte for byte, with less of it done in Python.

With `indent`, the standard library leaves its C encoder for a pure-Python
one made of nested generators. The C encoder does write one container at a
time exactly as the indented form wants when it is given that container's
separators: `{"a": 1,\n    "b": 2}` only lacks the line breaks after `{`
and before `}`. So a container of scalars is one C call, and a container of
scalars and such containers (each loop `describe`s) one call for itself
plus one per nested container; only what is deeper is walked here. On
`ls --json` of 10,000 loops this takes about three quarters of the standard
library's time (the compact C form takes a third): better, not free.
tests/test_jsontext.py compares the two on generated data.
"""

from __future__ import annotations

import json
from json import encoder as _std
from typing import Any

INDENT = "  "
_SCALARS = (str, int, float, bool, type(None))
_SCALAR_TYPES = frozenset(_SCALARS)
_TEXT = frozenset({str})
_CONTAINERS = frozenset({dict, list, tuple})
_text: Any = _std.encode_basestring_ascii  # the C one where there is one, as json uses
_make: Any = getattr(_std, "c_make_encoder", None)
_INF = float("inf")
# One C encoder per depth (its item separator carries the indentation).
_ENCODERS: dict[int, Any] = {}
_KEYS: dict[str, str] = {}  # `"name": `: the same few keys, 10,000 times


def _encoder(depth: int) -> Any:
    enc = _ENCODERS.get(depth)
    if enc is None:
        std = json.JSONEncoder(separators=(",\n" + INDENT * depth, ": "), allow_nan=False,
                               default=str)
        if _make is None:  # no C accelerator: the standard path
            enc = std.encode
        else:
            # No markers (cycle check): a dict left in them by a failed call
            # would make the next one fail; loopctl's data has no cycles.
            make = _make(
                None, std.default, _text, None, std.key_separator, std.item_separator,
                False, False, False)

            def enc(value: Any) -> str:
                return "".join(make(value, 0))
        _ENCODERS[depth] = enc
    return enc


def dumps(data: Any) -> str:
    out: list[str] = []
    _write(data, 0, out)
    return "".join(out)


def _flat(value: Any) -> bool:
    """A container whose values are all scalars (and, for a mapping, whose
    keys are text): the C encoder writes it whole. (Sets of types, built by
    `map` in C: this runs for every container.)"""
    if type(value) is dict:
        return set(map(type, value)) <= _TEXT and set(map(type, value.values())) <= _SCALAR_TYPES
    return set(map(type, value)) <= _SCALAR_TYPES


def _scalar(value: Any) -> str | None:
    """The common scalars, as json writes them; None for anything else."""
    kind = type(value)
    if kind is str:
        return _text(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if kind is int:
        return int.__repr__(value)
    if kind is float and value == value and value not in (_INF, -_INF):
        return float.__repr__(value)
    return None


def _write(value: Any, depth: int, out: list[str]) -> None:
    text = _scalar(value)
    if text is not None:
        out.append(text)
        return
    mapping = isinstance(value, dict)
    if not mapping and not isinstance(value, (list, tuple)):
        # What `default=str` makes of anything else, and json's own errors
        # (NaN, infinities) in its own words.
        out.append(_encoder(depth)(value))
        return
    if not value:
        out.append("{}" if mapping else "[]")
        return
    inner = "\n" + INDENT * (depth + 1)
    if _flat(value):
        text = _encoder(depth + 1)(value)
        out.append(text[0] + inner + text[1:-1] + "\n" + INDENT * depth + text[-1])
        return
    if _two_level(value, mapping, depth, out):
        return
    out.append("{" if mapping else "[")
    sep = inner
    for item in value.items() if mapping else value:
        if mapping:
            key, item = item
            out.append(sep + (_KEYS.get(key) or _key(key)))
        else:
            out.append(sep)
        sep = "," + inner
        text = _scalar(item)
        if text is None:
            _write(item, depth + 1, out)
        else:
            out.append(text)
    out.append("\n" + INDENT * depth + ("}" if mapping else "]"))


# Where a nested container's text goes. Data holding this very text is
# caught by counting (see `_two_level`) and walked instead.
_HOLE = "\x00loopctl-hole\x00"
_HOLE_TEXT = _text(_HOLE)


def _two_level(value: Any, mapping: bool, depth: int, out: list[str]) -> bool:
    """A container of scalars and flat containers (each loop `describe`s)
    in one C call, plus one per nested container, instead of a walk here:
    each nested one is written at its own depth and put where its
    placeholder was. False (nothing written) for any other container."""
    if mapping and not set(map(type, value)) <= _TEXT:
        return False
    values = list(value.values() if mapping else value)
    nested = []
    # Where the non-scalars are, found in C (list.index), not by a walk.
    scalar = list(map(_SCALAR_TYPES.__contains__, map(type, values)))
    at = -1
    while True:
        try:
            at = scalar.index(False, at + 1)
        except ValueError:
            break
        item = values[at]
        if type(item) not in _CONTAINERS or item and not _flat(item):
            return False
        if item:  # an empty one is written as it is: `{}`, `[]`
            nested.append(item)
            values[at] = _HOLE
    shallow = dict(zip(value, values, strict=True)) if mapping else values
    parts = _encoder(depth + 1)(shallow).split(_HOLE_TEXT)
    if len(parts) != len(nested) + 1:
        return False  # the data holds the placeholder's text itself
    inner, outer = "\n" + INDENT * (depth + 2), "\n" + INDENT * (depth + 1)
    pieces = [outer, parts[0][1:]]
    for item, part in zip(nested, parts[1:], strict=True):
        sub = _encoder(depth + 2)(item)
        pieces += (sub[0], inner, sub[1:-1], outer, sub[-1], part)
    text = "".join(pieces)  # the closing bracket at the end, at the wrong depth
    out.append(("{" if mapping else "[") + text[:-1] + "\n" + INDENT * depth + text[-1])
    return True


def _key(key: Any) -> str:
    """A mapping key and its separator as json writes them (text, numbers,
    booleans, None; anything else is json's TypeError)."""
    if isinstance(key, str):
        text = _KEYS[key] = _text(key) + ": "
        return text
    written = next(iter(json.loads(json.dumps({key: 0}))))
    return _text(written) + ": "
