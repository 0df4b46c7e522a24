"""Human output: aligned tables, relative times, colour only on a terminal."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from loopctl.domain.durations import format_rough
from loopctl.domain.untrusted import line

STYLES = {"green": "32", "red": "31", "yellow": "33", "dim": "2", "bold": "1", "cyan": "36"}
STATUS_STYLE = {"active": "green", "running": "cyan", "paused": "yellow", "failed": "red",
                "invalid": "red", "expired": "dim", "stopped": "dim", "completed": "green"}


def use_color(stream: Any = None) -> bool:
    stream = stream or sys.stdout
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def paint(text: str, style: str | None, color: bool | None = None) -> str:
    if not style or not (use_color() if color is None else color):
        return text
    return f"\x1b[{STYLES[style]}m{text}\x1b[0m"


def relative(ts: float | None, now: float) -> str:
    if ts is None:
        return "-"
    delta = ts - now
    if abs(delta) < 1:
        return "now"
    if delta > 0:
        return f"in {format_rough(delta)}"
    return f"overdue {format_rough(-delta)}"


def ago(ts: float | None, now: float) -> str:
    if ts is None:
        return "-"
    delta = now - ts
    return "just now" if delta < 1 else f"{format_rough(delta)} ago"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]],
          styles: list[str | None] | None = None, width: int = 80) -> str:
    """Columns padded to their widest cell; while the table is wider than
    `width`, the widest column gives up a character (cells end in "…").
    Every cell is one sanitized line: a name or an error read from a
    hand-edited loops.yaml must not reach the terminal as escape sequences."""
    cells = [list(headers)] + [[line(cell) for cell in r] for r in rows]
    natural = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    widths = list(natural)
    while sum(widths) + 2 * (len(widths) - 1) > width and max(widths) > 4:
        widths[widths.index(max(widths))] -= 1
    color = use_color()  # once: 10,000 rows would ask the terminal 10,000 times
    last = len(headers) - 1
    if not color and widths == natural and all(len(row) == len(headers) for row in rows):
        # Nothing to cut or paint: one format per row (10,000 rows in ~10 ms).
        pattern = "  ".join(f"{{:<{w}}}" for w in widths[:last]) + "  {}"
        return "\n".join(pattern.format(*row).rstrip() for row in cells)
    lines = []
    for n, row in enumerate(cells):
        parts = []
        for i, cell in enumerate(row):
            if len(cell) > widths[i]:
                cell = cell[: widths[i] - 1] + "…"
            text = cell.ljust(widths[i]) if i < last else cell
            style = "bold" if n == 0 else (styles[n - 1] if styles and i == 2 else None)
            parts.append(paint(text, style, color) if style and color else text)
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)
