"""Sizes as people type them (`--max-file-size 50MiB`): bytes, or a number
with K, M or G (binary: `M`, `MB` and `MiB` all mean 2**20)."""

from __future__ import annotations

import re

from loopctl.domain.errors import UsageError

_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}
_SIZE = re.compile(r"\s*([0-9]{1,15})\s*([kmg]?)(?:i?b)?\s*", re.I)
MAX_SIZE = 2**40


def parse_size(text: object, what: str = "size") -> int:
    """Bytes; UsageError naming `what` and the expected form otherwise."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        match = _SIZE.fullmatch(text) if isinstance(text, str) else None
        if match is None:
            raise UsageError(f"bad {what} {str(text)[:40]!r}: expected a size like 50MiB, "
                             "500K or 1048576")
        value = int(match.group(1)) * _UNITS[match.group(2).lower()]
    if not 0 < value <= MAX_SIZE:
        raise UsageError(f"bad {what} {value}: expected more than 0 and at most 1TiB")
    return value


def format_size(value: int) -> str:
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value % factor == 0:
            return f"{value // factor}{unit}"
    return str(value)
