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
    wide = render.table(HEADERS, [["a", "every 1h", "active", "0/50", "in 1h", "x" * 90]],
                        width=80)
    assert wide.splitlines()[1].endswith("…") and "x" * 10 in wide
    assert max(len(line) for line in wide.splitlines()) <= 80
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setattr(render, "use_color", lambda stream=None: True)
    painted = render.table(HEADERS, [["a", "every 1h", "active", "0/50", "in 1h", "ok"]],
                           ["green"])
    assert "\x1b[1mNAME" in painted and "\x1b[32mactive" in painted


def test_free_text_is_cut_before_names_and_two_names_never_print_alike(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29: `nightly-backup-primary` and `nightly-backup-replica` printed
    as the same `nightly-backup-p…`. Names are identifiers: never cut."""
    monkeypatch.setenv("NO_COLOR", "1")
    names = ["nightly-backup-primary-" + "x" * 40, "nightly-backup-replica-" + "x" * 40]
    rows = [[n, "every 1h", "failed (failure_limit)", "3/50", "in 1h",
             "failed: Not logged in · Please run /login"] for n in names]
    for width in (40, 60, 80, 130):
        lines = render.table(HEADERS, rows, width=width, first=(5,)).splitlines()
        assert [line.split("  ")[0] for line in lines[1:]] == names, width
    # The reason column gives way first; the rest keep what fits.
    lines = render.table(HEADERS, rows, width=120, first=(5,)).splitlines()
    assert "failed (failure_limit)" in lines[1] and lines[1].endswith("…")
    assert len(lines[1]) <= 120


def test_the_width_is_the_terminal_s_or_columns_else_80(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    monkeypatch.delenv("COLUMNS", raising=False)
    assert render.terminal_width(io.StringIO()) == 80  # not a terminal
    monkeypatch.setenv("COLUMNS", "132")
    assert render.terminal_width(io.StringIO()) == 132
    monkeypatch.setenv("COLUMNS", "junk")
    assert render.terminal_width(io.StringIO()) == 80
    monkeypatch.setenv("COLUMNS", "\u00b2")  # a digit to str.isdigit, not to int
    assert render.terminal_width(io.StringIO()) == 80


def test_fit_line_keeps_identifiers_whole_and_marks_what_it_cut() -> None:
    url = "https://github.com/o/r/pull/12345"
    line = render.fit_line(["20261202T063419Z-0001 ", "failed", "loopctl/w/20261202T063419Z-0001",
                            url], ["remote: " + "e" * 200], width=120)
    assert url in line and line.endswith("…") and len(line) <= 120
    # No room left: the identifiers still print whole, and the cut shows.
    narrow = render.fit_line(["run", url], ["remote: rejected"], width=20)
    assert narrow == f"run {url} …"
    assert render.fit_line(["a", url], ["short"], width=60) == f"a {url} short"


def _loop(name: str, schedule: str, outcome: str | None, reason: str | None) -> dict[str, object]:
    return {"name": name, "status": "active", "reason": None, "schedule": schedule, "used": 1,
            "limit": 50, "next_fire": 3600.0, "last_outcome": outcome, "last_reason": reason}


def test_a_narrow_ls_drops_whole_columns_before_it_cuts_an_outcome(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """LAST's reason gives way first, then SCHEDULE, RUNS and NEXT go whole;
    the outcome word (`failed…`) and the status are never cut to `fai…` while
    a column can still go."""
    monkeypatch.setenv("NO_COLOR", "1")
    loops = [_loop("failing-one-long-name", "cron */15 9-17 * * 1-5", "failed",
                   "could not connect to database"), _loop("hello", "every 10m", "ok", None)]
    heads = {}
    for width in (120, 74, 50, 44):
        shown = render.ls_table(loops, 0.0, width=width).splitlines()
        assert max(map(len, shown)) <= width, width
        heads[width] = shown[0].split()
        row = shown[1]
        assert "active" in row and "failed" in row and "…" not in row.split("failed")[0]
    assert heads[120] == render.LS_HEADERS
    assert heads[74] == ["NAME", "STATUS", "RUNS", "NEXT", "LAST"]  # SCHEDULE first
    assert heads[50] == ["NAME", "STATUS", "NEXT", "LAST"]
    assert heads[44] == ["NAME", "STATUS", "LAST"]
    # A wide terminal cuts nothing and drops nothing.
    assert "could not connect to database" in render.ls_table(loops, 0.0, width=120)
    # No column left to drop: a long status gives way before the outcome word.
    paused = [dict(loops[0], status="paused", reason="failure_limit")]
    row = render.ls_table(paused, 0.0, width=44).splitlines()[1]
    assert "failed…" in row and len(row) <= 44
