"""`render.table` prints 10,000 `ls` rows with one format per row when
nothing is cut or painted; it must print what the cell-by-cell path prints."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopctl.cli import render
from loopctl.domain.untrusted import line

HEADERS = ["NAME", "SCHEDULE", "STATUS", "RUNS", "NEXT", "LAST"]
cell = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=0x2200), max_size=8)


def cell_by_cell(rows: list[list[str]]) -> str:
    cells = [HEADERS, *[[line(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(HEADERS))]
    return "\n".join("  ".join(c.ljust(widths[i]) if i < len(HEADERS) - 1 else c
                               for i, c in enumerate(r)).rstrip() for r in cells)


@given(st.lists(st.lists(cell, min_size=6, max_size=6), max_size=30))
def test_the_fast_path_prints_what_cell_by_cell_padding_prints(rows: list[list[str]]) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NO_COLOR", "1")
        assert render.table(HEADERS, rows) == cell_by_cell(rows)


def test_cut_and_painted_tables_still_take_the_careful_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    wide = render.table(HEADERS, [["x" * 90, "every 1h", "active", "0/50", "in 1h", "ok"]])
    assert wide.splitlines()[1].startswith("x" * 10) and "…" in wide
    assert max(len(line) for line in wide.splitlines()) <= 80
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setattr(render, "use_color", lambda stream=None: True)
    painted = render.table(HEADERS, [["a", "every 1h", "active", "0/50", "in 1h", "ok"]],
                           ["green"])
    assert "\x1b[1mNAME" in painted and "\x1b[32mactive" in painted
