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
from typing import Any

from loopctl import __version__
from loopctl.domain.digests import sha256_hex
from loopctl.domain.model import LoopDef
from loopctl.domain.plain import factory, fields, record

FORMAT = 2
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


_LOOPS = b',"loops":['


def encode(key: str, parsed: Parsed, loops_json: bytes | None = None) -> bytes | None:
    """The cache file's bytes; None when JSON cannot hold the read exactly.
    `loops_json`: the loops already encoded (see `extended`)."""
    if parsed.names is None:
        return None
    try:
        head = json.dumps({
            "format": FORMAT, "key": key, "top": parsed.top, "names": parsed.names,
            "append_indent": parsed.append_indent, "invalid": parsed.invalid,
        }, allow_nan=False, separators=(",", ":")).encode()
        if loops_json is None:
            loops_json = json.dumps([_sparse(loop) for loop in parsed.loops.values()],
                                    allow_nan=False, separators=(",", ":")).encode()[1:-1]
    except (TypeError, ValueError):
        return None
    # `loops` last: one more loop is spliced in without encoding the rest.
    return head[:-1] + _LOOPS + loops_json + b"]}"


def extended(data: bytes | None, added: LoopDef) -> bytes | None:
    """The encoded loops of cache bytes `data` plus `added`: `start` of the
    10,001st loop re-encodes one loop, not 10,001. No JSON string can hold
    `,"loops":[` unescaped, so its first occurrence is the key itself."""
    at = data.find(_LOOPS) if data else -1
    if data is None or at < 0 or not data.endswith(b"]}"):
        return None
    try:
        one = json.dumps(_sparse(added), allow_nan=False, separators=(",", ":")).encode()
    except (TypeError, ValueError):
        return None
    old = data[at + len(_LOOPS):-2]
    return old + b"," + one if old else one


def decode(data: bytes, key: str) -> Parsed | None:
    """The cached read for `key`, or None if the file is another's or odd."""
    try:
        doc = json.loads(data, parse_constant=_refuse)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("key") != key:
            return None
        known = _defaults().keys()
        loops = {}
        for values in doc["loops"]:
            if not isinstance(values, dict) or not values.keys() <= known \
                    or not isinstance(values.get("name"), str):
                return None
            loops[values["name"]] = build(values)
        names, invalid, top = doc["names"], doc["invalid"], doc["top"]
        indent = doc["append_indent"]
        if not (isinstance(names, list) and all(isinstance(n, str) for n in names)
                and isinstance(invalid, dict) and isinstance(top, dict)
                and (indent is None or isinstance(indent, int))):
            return None
    except (ValueError, KeyError, TypeError):
        return None
    return Parsed(loops=loops, invalid=invalid, top=top, names=names, append_indent=indent)


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


def _refuse(constant: str) -> Any:
    raise ValueError(f"{constant} is not a number loopctl writes")


def json_exact(value: Any) -> bool:
    """True when JSON gives this value back unchanged: text keys only, and
    no YAML-only types (dates, sets, bytes)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and json_exact(v) for k, v in value.items())
    if isinstance(value, list):
        return all(json_exact(v) for v in value)
    return value is None or isinstance(value, (str, int, float, bool))
