"""A parsed copy of `loops.yaml`, keyed by the file's bytes.

PyYAML needs ~1.3 s to read 10,000 loops, and every driver pass and `ls`
reads them. The store keeps what a read produced (each valid loop's fields,
each invalid loop's error, the top-level settings, the loop names in file
order, and where a new loop can be appended) in `defs-cache.json` next to the
state, and reuses it while the SHA-256 of `loops.yaml` is the one it was made
from. The cache is loopctl's own derived file in its private state folder;
one that does not decode exactly as written is ignored and rebuilt.

That hash is no secret: anyone can compute it, so a cache planted with the
right key could make `tick` run a command `loops.yaml` does not hold (and
`show` and `validate`, which read the YAML, do not display). A derived file
must never widen what runs: the file is sealed, its first line an HMAC of
the rest under the home's secret key (storage/home_key.py), and a file
whose seal does not verify is no cache.

Pure functions only: the store reads and writes the file.
"""

from __future__ import annotations

import json

from loopctl import __version__
from loopctl.domain.loop_settings import SETTINGS
from loopctl.domain.model import LoopDef
from loopctl.fast.data_class import factory, fields, record
from loopctl.fast.digests import sha256_hex
from loopctl.storage.paths import refuse_constant

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

FORMAT = 4  # 4: the listed fields' columns, a line of their own
_DEFAULTS: dict[str, Any] = {}
_TUPLES = ("command", "agent_args", "notify", "copy", "protect")


@record
class Parsed:
    """What one read of `loops.yaml` yields, without the raw document."""

    loops: dict[str, LoopDef] = factory(dict)
    invalid: dict[str, str] = factory(dict)
    top: dict[str, Any] = factory(dict)
    # Every loop key in file order, when all are text (YAML allows `123:`).
    names: list[str] | None = None
    # Column of the loop names when a new entry can be appended at the end of
    # the file as text; None: the file must be rewritten (DESIGN §2).
    append_indent: int | None = None


def digest(source: bytes) -> str:
    """The cache key: the file's bytes and the code that parsed them."""
    return sha256_hex(f"{FORMAT}:{__version__}:".encode() + source)


def _defaults() -> dict[str, Any]:
    if not _DEFAULTS:
        probe = LoopDef(name="x")
        _DEFAULTS.update({name: getattr(probe, name) for name in fields(LoopDef)})
        # A row held in `more` (a setting added as its row alone).
        _DEFAULTS.update({s.name: s.default for s in SETTINGS if s.name not in _DEFAULTS})
    return _DEFAULTS


def _sparse(loop: LoopDef) -> dict[str, Any]:
    defaults = _defaults()
    return {k: v for k, v in vars(loop).items() if v != defaults[k] or k == "name"}


def build(values: dict[str, Any]) -> LoopDef:
    """A LoopDef over its non-default fields, without re-validating (the
    values were validated when the cache was made): the fields left out are
    read from the class, where the record keeps each default, so 10,000
    loops cost 10,000 small dicts and no constructor. `values` is taken over."""
    loop = object.__new__(LoopDef)
    for key in _TUPLES:
        value = values.get(key)
        if value is not None:
            values[key] = tuple(value)
    if "env" not in values:  # a per-instance default: not on the class
        values["env"] = {}
    object.__setattr__(loop, "__dict__", values)
    return loop


# The payload is one JSON document laid out on lines (JSON allows a line
# break between tokens, and a compact encoding has none inside a value):
#   {"format":4,"key":...,"invalid":{...},      the head
#   "rows":[[...],...],                          what `ls` needs of each loop
#   "listed":{"every":[...],...},                what `ls --json` shows of them
#   "loops":[
#   {"name":"a",...},                            one line per loop
#   {"name":"b",...}]}
# so `ls` decodes the rows line alone, `ls --json` the rows and listed lines,
# and `status NAME` the head and its loop's line (commands/listing.py), and
# `start` appends a loop by splicing.
_ROWS, _LISTED, _LOOPS = b'"rows":', b'"listed":', b'"loops":['


# What `ls` shows of a definition and what it needs to arm a loop that has
# no state entry yet (commands/listing.py), a column each (10,000 short
# lists cost more to decode than nine long ones).
ROW_KEYS = ("name", "text", "key", "limit", "for_s", "created", "after", "cron", "tz")


# The definition fields `ls --json` shows (commands/loop_object.py reads no
# other from the cache: the rows with a `view`, and `auto` for the schedule),
# on a line of their own after the rows (`ls` decodes none of them): for
# each field some loop holds at other than the default, its column, or
# `{"all": value}` when every loop holds one value written alike (a script's
# `start`s: one command, one cwd), which is decoded once.
LISTED = ("auto", *(s.name for s in SETTINGS if s.view))


def listed_fields(loops: list[LoopDef]) -> dict[str, Any]:
    """The listed line's mapping for `loops` (JSON-ready)."""
    from operator import attrgetter

    defaults = _defaults()
    out: dict[str, Any] = {}
    for name in LISTED:
        column = list(map(attrgetter(name), loops))
        if column.count(defaults[name]) != len(column):
            out[name] = {"all": column[0]} if _alike(column) else column
    return out


def _alike(column: list[Any]) -> bool:
    """One value, written alike (`1 == 1.0 == True` are not), in every cell."""
    if column.count(column[0]) != len(column):
        return False
    text = _compact(column[0])
    return _compact(column) == "[" + ",".join([text] * len(column)) + "]"


def _compact(value: Any) -> str:
    return json.dumps(value, allow_nan=False, separators=(",", ":"))


def row(loop: LoopDef) -> list[Any]:
    from loopctl.domain.timestamps import parse_iso

    created = parse_iso(loop.created_at) if loop.created_at else None
    return [loop.name, loop.schedule_text(), loop.schedule_key, loop.max_runs or None,
            loop.for_s, created, loop.after, loop.cron, loop.tz]


def _line(loop: LoopDef) -> bytes:
    values = _sparse(loop)
    values = {"name": values.pop("name"), **values}  # first: `one` finds a loop by it
    return json.dumps(values, allow_nan=False, separators=(",", ":")).encode()


def _rows_json(loops: list[LoopDef]) -> bytes:
    try:
        columns = [list(column) for column in zip(*map(row, loops), strict=True)]
        return json.dumps(columns or [[] for _ in ROW_KEYS], allow_nan=False,
                          separators=(",", ":")).encode()
    except ValueError:  # a creation time datetime cannot read: no rows, no fast listing
        return b"null"


def _listed_json(loops: list[LoopDef]) -> bytes:
    return json.dumps(listed_fields(loops), allow_nan=False, separators=(",", ":")).encode()


# The rows' JSON, the listed fields' JSON, and the loop lines joined by ",\n".
Body = tuple[bytes, bytes, bytes]


def encode(key: str, parsed: Parsed, body: Body | None = None) -> bytes | None:
    """The cache file's bytes; None when JSON cannot hold the read exactly.
    `body`: the rows, listed fields and loops already encoded (`extended`)."""
    if parsed.names is None:
        return None
    try:
        head = json.dumps({
            "format": FORMAT, "key": key, "top": parsed.top, "names": parsed.names,
            "append_indent": parsed.append_indent, "invalid": parsed.invalid,
        }, allow_nan=False, separators=(",", ":")).encode()
        if body is None:
            loops = list(parsed.loops.values())
            body = (_rows_json(loops), _listed_json(loops),
                    b",\n".join(_line(loop) for loop in loops))
    except (TypeError, ValueError):
        return None
    if b"\n" in head or b"\n" in body[0] or b"\n" in body[1]:
        return None
    return b"".join((head[:-1], b",\n", _ROWS, body[0], b",\n", _LISTED, body[1], b",\n",
                     _LOOPS, b"\n", body[2], b"]}"))


def extended(data: bytes | None, added: LoopDef) -> Body | None:
    """The rows, listed fields and loop lines of cache bytes `data` plus
    `added`: `start` of the 10,001st loop encodes one loop, not 10,001."""
    parts = split(data) if data else None
    if parts is None:
        return None
    loops = parts[3][:-2]
    try:
        one, extra = _line(added), _rows_json([added])
        more = _extended_listed(parts[2], loops.count(b"\n") + 1 if loops else 0, added)
    except (TypeError, ValueError):
        return None
    columns = rows(parts[1]) if extra != b"null" else None
    if columns is None:
        joined = b"null"
    else:
        for column, value in zip(columns, json.loads(extra), strict=True):
            column.extend(value)
        joined = json.dumps(columns, separators=(",", ":")).encode()
    return joined, more, loops + b",\n" + one if loops else one


def _extended_listed(text: bytes, count: int, added: LoopDef) -> bytes:
    """The listed line's JSON `text` of `count` loops with `added`'s values
    appended (see LISTED)."""
    fields = listed(text, count)
    if fields is None:
        raise ValueError("not the listed fields")
    mine = listed_fields([added])
    out: dict[str, Any] = {}
    for name in LISTED:
        value, found = getattr(added, name), fields.get(name)
        if name not in mine and found is None:
            continue
        if found is None or type(found) is tuple:  # one value in every loop so far
            before = _defaults()[name] if found is None else found[0]
            if count and _compact(before) == _compact(value):
                out[name] = {"all": before}
                continue
            found = [before] * count
        out[name] = [*found, value] if count else {"all": value}
    return _compact(out).encode()


def split(data: bytes) -> tuple[bytes, bytes, bytes, bytes] | None:
    """The head's JSON, the rows' JSON, the listed fields' JSON and the
    loops' lines (ending `]}`) of a payload laid out as `encode` writes it;
    None for any other layout (a cache of an older format, or one rewritten
    by hand or by a test)."""
    ends, at = [], -1
    for _ in range(4):
        at = data.find(b"\n", at + 1)
        ends.append(at)
    first, second, third, fourth = ends
    if fourth < 0 or data[first - 1:first] != b"," or data[second - 1:second] != b"," \
            or data[third - 1:third] != b"," or not data.startswith(_ROWS, first + 1) \
            or not data.startswith(_LISTED, second + 1) \
            or data[third + 1:fourth] != _LOOPS or not data.endswith(b"]}"):
        return None
    return (data[:first - 1] + b"}", data[first + 1 + len(_ROWS):second - 1],
            data[second + 1 + len(_LISTED):third - 1], data[fourth + 1:])


def decode(data: bytes, key: str) -> Parsed | None:
    """The cached read for `key`, or None if the file is another's or odd."""
    try:
        parts = split(data)
        if parts is None:  # not as `encode` lays it out: read it whole
            doc = json.loads(data, parse_constant=refuse_constant)
        else:  # the rows and listed fields are for `ls` alone
            doc = json.loads(parts[0], parse_constant=refuse_constant)
            doc["loops"] = json.loads(b"[" + parts[3][:-1], parse_constant=refuse_constant)
        if not _ours(doc, key):
            return None
        loops = {}
        for values in doc["loops"]:
            loop = _loop(values)
            if loop is None:
                return None
            loops[loop.name] = loop
    except (ValueError, KeyError, TypeError):
        return None
    return Parsed(loops=loops, invalid=doc["invalid"], top=doc["top"], names=doc["names"],
                  append_indent=doc["append_indent"])


@record(frozen=True)
class Parts:
    """A cache laid out as `encode` writes it, its loops undecoded."""

    head: dict[str, Any]  # format, key, names, invalid, top
    rows: bytes  # the rows' JSON (`rows`)
    listed: bytes  # the listed fields' JSON (`listed`)
    loops: bytes  # the loop lines (`one`)


def head(data: bytes, key: str) -> Parts | None:
    """The parts of a cache for `key` laid out as `encode` writes it, the
    head decoded; None: read it whole (`decode`)."""
    parts = split(data)
    if parts is None:
        return None
    try:
        doc = json.loads(parts[0], parse_constant=refuse_constant)
    except ValueError:
        return None
    return Parts(doc, parts[1], parts[2], parts[3]) if _ours(doc, key) else None


def rows(text: bytes) -> list[list[Any]] | None:
    """The rows' columns (ROW_KEYS), checked for the shape `row` writes."""
    try:
        found = json.loads(text, parse_constant=refuse_constant)
    except ValueError:
        return None
    if not isinstance(found, list) or len(found) != len(ROW_KEYS) \
            or not all(isinstance(column, list) for column in found) \
            or len(set(map(len, found))) != 1 \
            or not set(map(type, [*found[0], *found[1], *found[2]])) <= {str}:
        return None
    return found


def listed(text: bytes, count: int) -> dict[str, Any] | None:
    """The listed line of `count` loops (LISTED): for each field some loop
    holds at other than the default, its column, or `(value,)` for one value
    in every loop; checked for the shape written."""
    try:
        found = json.loads(text, parse_constant=refuse_constant)
    except ValueError:
        return None
    if type(found) is not dict or not found.keys() <= set(LISTED):
        return None
    for name, column in found.items():
        if type(column) is dict and column.keys() == {"all"}:
            found[name] = (column["all"],)
        elif type(column) is not list or len(column) != count:
            return None
    return found


def field_default(name: str) -> Any:
    """A LoopDef field's default: its value when a loop line leaves it out."""
    return _defaults()[name]


def one(lines: bytes, name: str) -> LoopDef | None:
    """The loop called `name` from the loop lines, decoding that line only;
    None when no line holds it (or it is not a loop `decode` would take)."""
    from loopctl.storage.jsonlines import line_span

    probe = b'{"name":' + json.dumps(name).encode()
    span = line_span(lines, probe)
    if span is None:
        return None
    text = lines[span[0]:span[1]]
    if text[len(probe):len(probe) + 1] not in (b",", b"}"):
        return None
    try:
        return _loop(json.loads(text, parse_constant=refuse_constant))
    except ValueError:
        return None


def _ours(doc: Any, key: str) -> bool:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("key") != key:
        return False
    names, invalid, top = doc.get("names"), doc.get("invalid"), doc.get("top")
    indent = doc.get("append_indent")
    return (isinstance(names, list) and set(map(type, names)) <= {str}
            and isinstance(invalid, dict) and isinstance(top, dict)
            and (indent is None or type(indent) is int))


def _loop(values: Any) -> LoopDef | None:
    if not isinstance(values, dict) or not values.keys() <= _defaults().keys() \
            or not isinstance(values.get("name"), str):
        return None
    return build(values)


def seal(key: bytes, payload: bytes) -> bytes:
    """The file's bytes: the payload's HMAC on a line of its own, then it."""
    from loopctl.storage.home_key import mac

    return mac(key, payload).encode() + b"\n" + payload


def unseal(key: bytes | None, data: bytes) -> bytes | None:
    """The payload of a file sealed under `key`, else None."""
    from loopctl.storage.home_key import verify

    tag, newline, payload = data.partition(b"\n")
    if not newline or not tag.isascii():
        return None
    return payload if verify(key, payload, tag.decode()) else None


def json_exact(value: Any) -> bool:
    """True when JSON gives this value back unchanged: text keys only, and
    no YAML-only types (dates, sets, bytes)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and json_exact(v) for k, v in value.items())
    if isinstance(value, list):
        return all(json_exact(v) for v in value)
    return value is None or isinstance(value, (str, int, float, bool))
