"""Sizes like `100MiB`, `512k`, `2G` <-> bytes (powers of 1024, as `ls -h`)."""

from __future__ import annotations

from loopctl.domain.errors import UsageError
from loopctl.fast.lazy_re import lazy

UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_SIZE = lazy(r"([0-9]{1,15})\s*([kmgt]?)(?:i?b)?")
EXPECTED = "a size like 100MiB, 512k or 2G"
MAX_BYTES = 1024**5  # a pebibyte: past that it is a typo


def parse_size(text: object, what: str = "size", low: int = 1) -> int:
    """Bytes from a size; a bare integer (YAML) counts as bytes."""
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        raise UsageError(f"bad {what} {text!r}: expected {EXPECTED}")
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE.fullmatch(text.strip().lower())
        if not match:
            raise UsageError(f"bad {what} {text[:40]!r}: expected {EXPECTED}")
        value = int(match.group(1)) * UNITS[match.group(2)]
    if value < low:
        raise UsageError(f"bad {what} {text!r}: must be at least {format_size(low)}")
    if value > MAX_BYTES:
        raise UsageError(f"bad {what} {text!r}: larger than 1 PiB")
    return value


def format_size(value: int) -> str:
    """The largest unit that divides exactly: 104857600 -> `100MiB`."""
    for unit, name in (("t", "TiB"), ("g", "GiB"), ("m", "MiB"), ("k", "KiB")):
        if value >= UNITS[unit] and value % UNITS[unit] == 0:
            return f"{value // UNITS[unit]}{name}"
    return f"{value}B"
