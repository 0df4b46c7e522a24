"""A reader for the one JSON shape the `tick` fast path needs: a flat object
whose values are numbers, booleans, null, escape-free strings or arrays of
numbers (what the store writes to `summary.json`).

Why not `json`: `json.decoder` imports `re`, and `re` (with `enum`) is about
a third of an idle tick's instructions (bench/README.md). Anything outside
the shape, or not valid JSON, gives None, and the caller then takes the full
path, which decides properly: this reader may refuse, never mislead.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_NUMBER_CHARS = frozenset("0123456789-+.eE")
_WORDS: dict[str, Any] = {"true": True, "false": False, "null": None}


def parse(text: str) -> dict[str, Any] | None:
    """The object in `text`, or None when it is not of the flat shape."""
    body = text.strip()
    if len(body) < 2 or body[0] != "{" or body[-1] != "}":
        return None
    try:
        return _members(body[1:-1].strip())
    except (ValueError, IndexError):
        return None


def _members(body: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    pos = 0
    while pos < len(body):
        key, pos = _string(body, _skip(body, pos))
        pos = _skip(body, pos)
        if body[pos] != ":":
            raise ValueError("no colon")
        value, pos = _value(body, _skip(body, pos + 1))
        if key in found:
            raise ValueError("duplicate key")
        found[key] = value
        pos = _skip(body, pos)
        if pos < len(body):
            if body[pos] != ",":
                raise ValueError("no comma")
            pos = _skip(body, pos + 1)
            if pos >= len(body):
                raise ValueError("trailing comma")
    return found


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _string(text: str, pos: int) -> tuple[str, int]:
    if text[pos] != '"':
        raise ValueError("not a string")
    end = text.index('"', pos + 1)
    value = text[pos + 1:end]
    if "\\" in value or any(ord(ch) < 0x20 for ch in value):
        raise ValueError("escapes are not of the shape")
    return value, end + 1


def _value(text: str, pos: int) -> tuple[Any, int]:
    head = text[pos]
    if head == '"':
        return _string(text, pos)
    if head == "[":
        return _numbers(text, pos + 1)
    for word, value in _WORDS.items():
        if text.startswith(word, pos):
            return value, pos + len(word)
    return _number(text, pos)


def _numbers(text: str, pos: int) -> tuple[list[int | float], int]:
    items: list[int | float] = []
    pos = _skip(text, pos)
    if text[pos] == "]":
        return items, pos + 1
    while True:
        number, pos = _number(text, _skip(text, pos))
        items.append(number)
        pos = _skip(text, pos)
        if text[pos] == "]":
            return items, pos + 1
        if text[pos] != ",":
            raise ValueError("no comma in array")
        pos += 1


def _number(text: str, pos: int) -> tuple[int | float, int]:
    end = pos
    while end < len(text) and text[end] in _NUMBER_CHARS:
        end += 1
    token = text[pos:end]
    if not token or token[0] == "+" or token.lstrip("-")[:1] in ("", ".", "e", "E"):
        raise ValueError("not a number")
    digits = token.lstrip("-")
    if len(digits) > 1 and digits[0] == "0" and digits[1] not in ".eE":
        raise ValueError("leading zero")
    if any(ch in token for ch in ".eE"):
        number = float(token)
        if number != number or number in (float("inf"), float("-inf")):
            raise ValueError("not finite")
        return number, end
    return int(token), end
