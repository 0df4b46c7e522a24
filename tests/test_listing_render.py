"""The `ls` table at scale (issue 30): what was made faster prints what it
printed before. Each is compared with a plain reference implementation."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from loopctl.cli.render import table
from loopctl.domain.durations import format_rough
from loopctl.domain.untrusted import line


def rough_reference(seconds: float) -> str:
    """format_rough as it was: a walk over the units, weeks skipped."""
    remaining = int(round(abs(seconds)))
    if remaining == 0:
        return "0s"
    parts = []
    for unit, size in {"d": 86400, "h": 3600, "m": 60, "s": 1}.items():
        count, remaining = divmod(remaining, size)
        if count:
            parts.append(f"{count}{unit}")
        if len(parts) == 2 or (parts and count == 0):
            break
    return "".join(parts)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.integers(-10**9, 10**9), st.floats(-1e9, 1e9, allow_nan=False),
                 st.sampled_from([0, 0.4, 0.5, 59, 60, 61, 3599, 3600, 3660, 86399, 86400,
                                  90000, 7 * 86400, 10 * 365 * 86400])))
def test_format_rough_says_what_it_said(seconds: float) -> None:
    assert format_rough(seconds) == rough_reference(seconds)


def table_reference(headers: list[str], rows: list[list[Any]], width: int) -> str:
    """render.table as it was (no colour): a cell at a time."""
    cells = [list(headers)] + [[line(cell) for cell in r] for r in rows]
    natural = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    widths = list(natural)
    while sum(widths) + 2 * (len(widths) - 1) > width:
        free = [i for i in range(len(widths)) if i != 0 and widths[i] > 4]
        if not free:
            break
        widths[max(free, key=lambda i: widths[i])] -= 1
    last = len(headers) - 1
    lines = []
    for row in cells:
        parts = []
        for i, cell in enumerate(row):
            if len(cell) > widths[i]:
                cell = cell[: widths[i] - 1] + "…"
            parts.append(cell.ljust(widths[i]) if i < last else cell)
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


CELL = st.one_of(st.text(max_size=12), st.sampled_from(
    ["\x1b[31mred", "a\nb", "\u202eevil", "tab\there", "", "  ", "é🙂", "\x00"]),
    st.integers(), st.none())


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 4).flatmap(lambda n: st.tuples(
    st.lists(st.text("ABC", min_size=1, max_size=5), min_size=n, max_size=n),
    st.lists(st.lists(CELL, min_size=n, max_size=n), max_size=6),
    st.integers(8, 120))))
def test_the_table_is_what_it_was(case: tuple[list[str], list[list[Any]], int]) -> None:
    headers, rows, width = case
    shown = table(headers, rows, width=width)
    assert shown == table_reference(headers, rows, width)
    assert "\x1b" not in shown and "\u202e" not in shown and shown.count("\n") == len(rows)
