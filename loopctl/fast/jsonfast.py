"""`json.loads` and `json.dumps` for the run path, without importing `json`.

Importing the `json` package compiles six regular expressions in
`json.decoder`, `json.scanner` and `json.encoder`: ~5M instructions of every
run's start (the tick's driver, `run NAME`), for no pattern a run uses. The
work itself was always done by `_json`, the C scanner and encoder those
modules wrap; this module calls them the same way. Whatever they do not
take as is (an indent, a hook, input that does not parse, bytes that are not
plain UTF-8) goes to the `json` module itself, imported then, so the answer
and every error are `json`'s own. `JSONDecodeError` is `json`'s, named here
for `except` clauses (evaluated only when something was raised), and
`json.encoder`'s C functions for the state file's writer.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

try:
    import _json as _c_json
except ImportError:  # another implementation: json, always
    _c_json = None  # type: ignore[assignment]
_ascii: Any = _c_json and _c_json.encode_basestring_ascii
_make_encoder: Any = _c_json and _c_json.make_encoder
_make_scanner: Any = _c_json and _c_json.make_scanner
# What state.json's writer takes from `json.encoder` (storage/statefile.py).
encode_basestring_ascii: Any
c_make_encoder: Any
if _c_json is not None:
    encode_basestring_ascii, c_make_encoder = _ascii, _make_encoder

_WHITESPACE = " \t\n\r"
_INF = float("inf")
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class _Context:
    """What the C scanner reads off a `json.JSONDecoder` (its defaults)."""

    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    strict = True

    def __init__(self, parse_constant: Callable[[str], Any] | None) -> None:
        self.parse_constant = parse_constant or _CONSTANTS.__getitem__


_SCANNERS: dict[Any, Any] = {}


def refuse_constant(word: str) -> Any:
    """A `parse_constant` for loopctl's own files: NaN and the infinities are
    never written there (atomic.strict_json), so reading one is damage."""
    raise ValueError(f"{word} is not a number loopctl writes")


def loads(text: str | bytes | bytearray, **options: Any) -> Any:
    """`json.loads(text, **options)`."""
    if _make_scanner is None or set(options) - {"parse_constant"}:
        return _json().loads(text, **options)
    if not isinstance(text, str):
        if not isinstance(text, (bytes, bytearray)) or text[:4].count(0) \
                or text[:3] == b"\xef\xbb\xbf":  # not bytes; UTF-16/32; a BOM
            return _json().loads(text, **options)
        try:
            text = bytes(text).decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return _json().loads(text, **options)
    constant = options.get("parse_constant")
    scan = _SCANNERS.get(constant)
    if scan is None:
        scan = _SCANNERS[constant] = _make_scanner(_Context(constant))
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = scan(text, start)
    except (StopIteration, ValueError):
        return _json().loads(text, **options)  # raises json's own error
    if text[end:].strip(_WHITESPACE):
        return _json().loads(text, **options)  # "Extra data"
    return value


def dumps(value: Any, *, sort_keys: bool = False, allow_nan: bool = True,
          separators: tuple[str, str] | None = None, **options: Any) -> str:
    """`json.dumps(value, ...)` with `ensure_ascii` and `check_circular` on
    and no indent, default or class: the C encoder, as `json` calls it."""
    indent = options.get("indent")
    plain = options.get("ensure_ascii", True) is True and separators is None if indent \
        else options.get("ensure_ascii", True) is True
    if _make_encoder is None or not plain or set(options) - {"ensure_ascii", "indent"} \
            or indent is not None and (type(indent) is not int or indent < 1):
        return _json().dumps(value, sort_keys=sort_keys, allow_nan=allow_nan,
                             separators=separators, **options)
    if indent is not None:  # a run record, pretty: json's own layout
        try:
            return _indented(value, " " * indent, "\n", sort_keys, allow_nan)
        except (_Unusual, RecursionError):  # a loop in the data: json says which
            return _json().dumps(value, sort_keys=sort_keys, allow_nan=allow_nan, **options)
    if isinstance(value, str):
        return str(_ascii(value))
    item, key = separators or (", ", ": ")
    encode = _make_encoder({}, _unserializable, _ascii, None, key, item, sort_keys, False,
                           allow_nan)
    return "".join(encode(value, 0))


class _Unusual(Exception):
    """Something `_indented` leaves to `json` (which answers, or raises)."""


def _indented(value: Any, step: str, at: str, sort_keys: bool, allow_nan: bool) -> str:
    """What `json.dumps(value, indent=len(step), sort_keys=..., allow_nan=...)`
    writes, for plain data (text keys; text, numbers, booleans, None, lists,
    tuples, dicts); `at` is the line break and indentation of this level."""
    kind = type(value)
    if kind is str:
        return str(_ascii(value))
    if value is None or kind is bool:
        return "null" if value is None else "true" if value else "false"
    if kind is int:
        return int.__repr__(value)
    if kind is float:
        if value != value or value in (_INF, -_INF):
            if not allow_nan:
                raise _Unusual  # json's own ValueError
            return "NaN" if value != value else "Infinity" if value > 0 else "-Infinity"
        return float.__repr__(value)
    inner = at + step
    if kind is dict:
        if not value:
            return "{}"
        if any(type(key) is not str for key in value):
            raise _Unusual
        pairs = sorted(value.items()) if sort_keys else value.items()
        return ("{" + inner + ("," + inner).join(
            str(_ascii(key)) + ": " + _indented(item, step, inner, sort_keys, allow_nan)
            for key, item in pairs) + at + "}")
    if kind is list or kind is tuple:
        if not value:
            return "[]"
        return ("[" + inner + ("," + inner).join(
            _indented(item, step, inner, sort_keys, allow_nan) for item in value) + at + "]")
    raise _Unusual


def _unserializable(value: Any) -> Any:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def _json() -> Any:
    import json

    return json


def __getattr__(name: str) -> Any:
    if name == "JSONDecodeError":
        return _json().JSONDecodeError
    if name in ("encode_basestring_ascii", "c_make_encoder"):  # no `_json` here
        return getattr(_json().encoder, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
