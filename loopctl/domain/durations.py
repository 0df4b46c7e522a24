"""Durations like `45s`, `10m`, `1h30m`, `2d`, `1w` <-> whole seconds."""

from __future__ import annotations

from loopctl.domain.errors import UsageError, shorten

UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
# Ten years: beyond that a duration is a typo, and timestamps would overflow
# what datetime can represent once added to now.
MAX_SECONDS = 10 * 365 * 86400
# ASCII digits only: str.isdigit() admits "²" and other scripts' digits.
# Read a character at a time, not by regular expressions: compiling the
# three it took was ~1.2M instructions of each run that reads its loop.
_DIGITS = frozenset("0123456789")

EXPECTED = "a duration like 45s, 10m, 1h30m, 2d or 1w"


def parse_duration(text: object, what: str = "duration") -> int:
    """Parse a duration; a bare integer (YAML) counts as seconds."""
    if isinstance(text, bool):
        raise UsageError(f"bad {what} {shorten(text)}: expected {EXPECTED}")
    if isinstance(text, int):
        seconds = text
    elif isinstance(text, str):
        seconds = _parse_text(text.strip().lower(), what)
    else:
        raise UsageError(f"bad {what} {shorten(text)}: expected {EXPECTED}")
    if seconds <= 0:
        raise UsageError(f"bad {what} {shorten(text)}: must be at least 1s")
    if seconds > MAX_SECONDS:
        raise UsageError(f"bad {what} {shorten(text)}: longer than the 10-year maximum")
    return seconds


def parse_setting(value: object, what: str) -> int:
    """A duration setting, from loops.yaml or (`what` an option, `--every`)
    the command line: as `parse_duration`, but a bare number (`every: 10`,
    `timeout: "300"`, `--every 10`) is refused: ten seconds or ten minutes
    cannot be told apart. `--every 0` is a duration under 1s."""
    if isinstance(value, int) and not isinstance(value, bool) \
            or isinstance(value, str) and _is_number(value.strip()):
        number = str(value).strip()
        if what.startswith("--") and int(number) > 0:  # an option: as its help says it
            raise UsageError(f"bad {what} {value!r}: give a unit, like {number}s or {number}m")
        if not what.startswith("--"):
            raise UsageError(f"bad {what} {shorten(value)}: a bare number has no unit; "
                             f"give one, like {number}s or {number}m")
    return parse_duration(value, what)


def _is_number(text: str) -> bool:
    """`[0-9]{1,12}`, whole."""
    return 0 < len(text) <= 12 and all(c in _DIGITS for c in text)


def _parts(text: str) -> list[tuple[str, str]] | None:
    """The (digits, unit) pairs of `(?:[0-9]+[wdhms])+`, whole; None when
    `text` is not that."""
    parts, start = [], 0
    for at, char in enumerate(text):
        if char in _DIGITS:
            continue
        if char not in UNITS or at == start:
            return None
        parts.append((text[start:at], char))
        start = at + 1
    return parts if parts and start == len(text) else None


def _parse_text(text: str, what: str) -> int:
    if _is_number(text):
        return int(text)
    parts = _parts(text)
    if parts is None:
        raise UsageError(f"bad {what} {shorten(text)}: expected {EXPECTED}")
    units = [unit for _, unit in parts]
    order = list(UNITS)
    if len(set(units)) != len(units) or units != sorted(units, key=order.index):
        raise UsageError(f"bad {what} {shorten(text)}: give each unit once, largest first")
    total = 0
    for number, unit in parts:
        if len(number) > 12:
            raise UsageError(f"bad {what} {shorten(text)}: longer than the 10-year maximum")
        total += int(number) * UNITS[unit]
    return total


def format_duration(seconds: float) -> str:
    """Compact form: 5400 -> `1h30m`; 0 -> `0s`; sub-second rounds."""
    remaining = int(round(abs(seconds)))
    if remaining == 0:
        return "0s"
    parts = []
    for unit, size in UNITS.items():
        if unit == "w" and remaining % size:
            continue  # `10d` reads better than `1w3d`
        count, remaining = divmod(remaining, size)
        if count:
            parts.append(f"{count}{unit}")
    return ("-" if seconds < 0 else "") + "".join(parts)


def format_rough(seconds: float) -> str:
    """Two most significant units, for human tables: 5430 -> `1h30m`; a
    zero second unit is left out (`2h`, not `2h0m`). Arithmetic, not a
    walk over UNITS: `ls` writes one per loop."""
    remaining = int(round(abs(seconds)))
    if remaining == 0:
        return "0s"
    days, remaining = divmod(remaining, 86400)
    if days:
        hours = remaining // 3600
        return f"{days}d{hours}h" if hours else f"{days}d"
    hours, remaining = divmod(remaining, 3600)
    if hours:
        minutes = remaining // 60
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    minutes, remaining = divmod(remaining, 60)
    if minutes:
        return f"{minutes}m{remaining}s" if remaining else f"{minutes}m"
    return f"{remaining}s"


def format_usd(amount: float) -> str:
    """Dollars to the cent, and below a cent to two significant digits:
    Claude's `$0.00028` is not `$0.00`, nor a budget of 0.0005."""
    import math

    if amount == 0 or not math.isfinite(amount):
        return f"${amount:.2f}"
    if abs(amount) >= 0.01:
        return f"${amount:.2f}"
    digits = 1 - math.floor(math.log10(abs(amount)))
    return "$" + f"{amount:.{digits}f}".rstrip("0")


def plural(n: int, word: str) -> str:
    """`1 failure`, `3 failures`."""
    return f"{n} {word}" + ("" if n == 1 else "s")
