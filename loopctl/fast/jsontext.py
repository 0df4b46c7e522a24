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
tests/cli/test_jsontext.py compares the two on generated data.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import compress, groupby, repeat
from json import encoder as _std
from operator import is_
from typing import Any

INDENT = "  "
_SCALARS = (str, int, float, bool, type(None))
_SCALAR_TYPES = frozenset(_SCALARS)
_TEXT = frozenset({str})
_CONTAINERS = frozenset({dict, list, tuple})
_DICT = {dict}
_SEQUENCES = frozenset({list, tuple})
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
    return "".join(pieces(data))


def pieces(data: Any) -> list[str]:
    """`dumps(data)` as the pieces it joins, all written before the first is
    returned (an error is raised before any output)."""
    out: list[str] = []
    _write(data, 0, out)
    return out


CHUNK = 1 << 16  # characters


def chunks(parts: list[str]) -> Any:
    """`parts` joined into texts of about CHUNK characters: `ls --json` of
    10,000 loops is ~15 MB, which joined and then encoded whole costs two
    fresh 15 MB buffers (page faults included) instead of one small one
    reused."""
    group: list[str] = []
    size = 0
    for part in parts:
        group.append(part)
        size += len(part)
        if size >= CHUNK:
            yield "".join(group)
            group, size = [], 0
    yield "".join(group)


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


class Table:
    """Records given a field at a time (`ls --json`'s LOOP objects): written
    as the list of mappings `rows()` gives, without building them."""

    def __init__(self, keys: Sequence[str], columns: Sequence[Sequence[Any]], count: int,
                 same: Sequence[bool] = ()) -> None:
        """`same[i]`: the caller made column i one object in every cell (it
        is written once, its 10,000 cells not looked at)."""
        self.keys, self.columns, self.count = list(keys), list(columns), count
        self.same = list(same) or [False] * len(self.columns)

    def rows(self) -> list[dict[str, Any]]:
        return [dict(zip(self.keys, row, strict=True))
                for row in zip(*self.columns, strict=True)] if self.columns else \
            [{} for _ in range(self.count)]


def _write(value: Any, depth: int, out: list[str]) -> None:
    if type(value) is Table:
        pieces = None if value.count < 2 or not value.keys or _rows_encoder() is None else \
            _columns_pieces(value.keys, value.columns, value.count, depth, value.same)
        if pieces is None:
            _write(value.rows(), depth, out)
        else:  # pieces, not one text: 10,000 records are megabytes, copied once by `dumps`
            out.append("[\n" + INDENT * (depth + 1))
            out += pieces
            out.append("\n" + INDENT * depth + "]")
        return
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
    if not mapping and len(value) > 1 and set(map(type, value)) == _DICT \
            and _records(value, depth, out):
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


# -- a list of records (`ls --json`: 10,000 LOOP objects) --------------------
#
# One C call per column, not per record. A raw control character never
# appears in the encoder's output (strings escape them), so `_CUT` can
# separate what it writes and be split on; the nested containers, flat, have
# no bracket outside their strings but their own, and no raw line break.

_CUT = "\x01"
_ROWS: Any = None  # the C encoder with `_CUT` as its item separator


def _rows_encoder() -> Any:
    global _ROWS
    if _ROWS is None and _make is not None:
        make = _make(None, None, _text, None, ": ", _CUT, False, False, False)
        _ROWS = lambda value: "".join(make(value, 0))  # noqa: E731
    return _ROWS


def _records(value: Any, depth: int, out: list[str]) -> bool:
    """A list of mappings, written run by run (consecutive records with the
    same keys); a record that `_same_keys` does not take is written alone."""
    if _rows_encoder() is None:
        return False
    texts = []
    for keys, run in groupby(value, key=tuple):
        group = list(run)
        text = _same_keys(group, keys, depth) if keys and len(group) > 1 else None
        texts.append(_joined(group, depth) if text is None else text)
    inner = "\n" + INDENT * (depth + 1)
    out.append("[" + inner + ("," + inner).join(texts) + "\n" + INDENT * depth + "]")
    return True


def _joined(group: list[Any], depth: int) -> str:
    pieces = []
    for item in group:
        parts: list[str] = []
        _write(item, depth + 1, parts)
        pieces.append("".join(parts))
    return (",\n" + INDENT * (depth + 1)).join(pieces)


def _same_keys(group: list[dict[str, Any]], keys: tuple[Any, ...], depth: int) -> str | None:
    """Records with the same text keys, from `{` of the first to `}` of the
    last; None when one holds what this does not write. Each column is
    written in one C call; a column that reads the same in every record
    (most of a LOOP object's: null, false, 0) is written once, into the
    text between the others."""
    return _columns_text(keys, list(zip(*map(dict.values, group), strict=True)), len(group),
                         depth)


def _columns_text(keys: Sequence[Any], columns: Sequence[Sequence[Any]], count: int,
                  depth: int) -> str | None:
    """`count` records given as columns (`columns[i][n]`: record n's value
    for `keys[i]`), as `_same_keys` writes them."""
    pieces = _columns_pieces(keys, columns, count, depth)
    return None if pieces is None else "".join(pieces)


def _columns_pieces(keys: Sequence[Any], columns: Sequence[Sequence[Any]], count: int,
                    depth: int, same: Sequence[bool] = ()) -> list[str] | None:
    """`_columns_text` as the pieces to join (`same`: see Table)."""
    if not set(map(type, keys)) <= _TEXT:
        return None
    lead = "\n" + INDENT * (depth + 2)
    segments, varying = [], []
    segment = ""
    for at, column in enumerate(columns):
        segment += ("," if at else "{") + lead + _text(keys[at]) + ": "
        # One object in every cell (commands/loop_object shares them) is
        # known in one pass, before the types of 10,000 cells are collected.
        kinds = None if same and same[at] or all(map(is_, column, repeat(column[0]))) \
            else set(map(type, column))
        if kinds is None or _same_everywhere(column, kinds):
            written: list[str] = []
            _write(column[0], depth + 2, written)
            segment += "".join(written)
            continue
        texts = _column_texts(column, kinds, depth + 2)
        if texts.count(texts[0]) == count:
            segment += texts[0]
        else:
            segments.append(segment)
            varying.append(texts)
            segment = ""
    segments.append(segment + "\n" + INDENT * (depth + 1) + "}")
    between = ",\n" + INDENT * (depth + 1)
    if not varying:
        return [between.join([segments[0]] * count)]
    width = len(varying)
    cells: list[str] = [""] * (width * count)
    for at, texts in enumerate(varying):
        cells[at::width] = texts
    row = [*segments[1:-1], segments[-1] + between + segments[0]]
    pieces: list[str] = [""] * (2 * len(cells) + 1)
    pieces[0::2] = [segments[0], *row * (count - 1), *segments[1:]]
    pieces[1::2] = cells
    return pieces


def _same_everywhere(column: Sequence[Any], kinds: set[type]) -> bool:
    """Every cell is written alike, known without writing them: equal, and
    of one type, position by position inside a container (`1 == True ==
    1.0`), floats alike to the bit (`0.0 == -0.0`)."""
    first = column[0]
    if len(kinds) != 1:
        return False
    if column.count(first) != len(column):
        return False
    if type(first) not in _CONTAINERS:
        return _alike(list(column), kinds)
    from operator import itemgetter

    # Equal mappings may hold their keys in another order, written apart.
    if type(first) is dict and list(map(tuple, column)).count(tuple(first)) != len(column):
        return False
    for at in first if type(first) is dict else range(len(first)):
        values = list(map(itemgetter(at), column))
        if not _same_everywhere(values, set(map(type, values))):  # inside, position by position
            return False
    return True


def _alike(values: list[Any], kinds: set[type]) -> bool:
    """Equal values are written alike (one type; for floats, one bit pattern)."""
    # Equal floats differ in their bits only as 0.0 and -0.0 (NaN is unequal).
    return len(kinds) == 1 and (kinds != {float} or values[0] != 0
                                or len(set(map(float.hex, values))) == 1)


def _column_texts(column: Sequence[Any], kinds: set[type], depth: int) -> list[str]:
    """Each cell of a column as written at `depth` (the record's keys): in
    C calls for scalars and flat containers, else a cell at a time."""
    if kinds == _TEXT:
        return list(map(_text, column))
    if kinds <= _SCALAR_TYPES:
        return _rows_encoder()(list(column))[1:-1].split(_CUT)
    filled = _column(column, kinds, depth)
    if filled is None:  # deeper containers (a gate's argv), or what `default` writes
        texts = []
        for cell in column:
            written: list[str] = []
            _write(cell, depth, written)
            texts.append("".join(written))
        return texts
    full, written = filled
    plain = [None if f else cell for cell, f in zip(column, full, strict=True)]
    texts = _rows_encoder()(plain)[1:-1].split(_CUT)
    nested = iter(written)
    return [next(nested) if f else text for text, f in zip(texts, full, strict=True)]


def _column(column: Sequence[Any], kinds: set[type], depth: int
            ) -> tuple[list[bool], list[str]] | None:
    """Which cells hold a non-empty container, and each one's text written
    at `depth` (the record's keys); None unless every container is flat
    and of one kind (mappings with text keys, or sequences)."""
    shapes = kinds - _SCALAR_TYPES
    if not (shapes == _DICT or shapes <= _SEQUENCES):
        return None
    full = [type(cell) in shapes and len(cell) > 0 for cell in column]
    items = list(compress(column, full))
    if shapes == _DICT:
        if not set(map(type, _chain(items))) <= _TEXT \
                or not set(map(type, _chain(map(dict.values, items)))) <= _SCALAR_TYPES:
            return None
        ends = "}{"
    else:
        if not set(map(type, _chain(items))) <= _SCALAR_TYPES:
            return None
        ends = "]["
    if not items:
        return full, []
    inner, outer = "\n" + INDENT * (depth + 1), "\n" + INDENT * depth
    body = _encoder(depth + 1)(items)[1:-1]
    body = body.replace(ends[0] + "," + inner + ends[1], outer + ends[0] + _CUT + ends[1] + inner)
    return full, (body[0] + inner + body[1:-1] + outer + body[-1]).split(_CUT)


def _chain(items: Any) -> Any:
    from itertools import chain

    return chain.from_iterable(items)
