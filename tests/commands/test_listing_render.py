"""The `ls` table at scale (issue 30): what was made faster prints what it
printed before. Each is compared with a plain reference implementation."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from loop_state_support import set_fields

from conftest import CLI, agent_command, in_process
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


@settings(max_examples=150, deadline=None)
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


@settings(max_examples=120, deadline=None)
@given(st.integers(1, 4).flatmap(lambda n: st.tuples(
    st.lists(st.text("ABC", min_size=1, max_size=5), min_size=n, max_size=n),
    st.lists(st.lists(CELL, min_size=n, max_size=n), max_size=6),
    st.integers(8, 120))))
def test_the_table_is_what_it_was(case: tuple[list[str], list[list[Any]], int]) -> None:
    headers, rows, width = case
    shown = table(headers, rows, width=width)
    assert shown == table_reference(headers, rows, width)
    assert "\x1b" not in shown and "\u202e" not in shown and shown.count("\n") == len(rows)


def test_ls_json_written_by_columns_says_what_status_says_of_each_loop(cli: CLI) -> None:
    """`ls --json` of valid loops is written a field at a time (no mapping
    per loop): each LOOP object must be what `status NAME --json` prints,
    for loops in every state the shape has a field for."""
    from loopctl.commands import views as reading
    from loopctl.storage.store import Store

    cli("start", "p", "--name", "failing", "--every", "1h", "--command",
        agent_command("--print", "it broke here", "--exit", "3"), check=0)
    cli("run", "failing", check=1)  # a failed last run: its reason comes from the record
    cli("start", "p", "--name", "gated", "--cron", "*/5 * * * *", "--tz", "UTC",
        "--if", "true", "--notify", "json://example.invalid/hook?token=secret", check=0)
    cli("start", "p", "--name", "quiet", "--every", "10m", "--after", "1h", check=0)
    store = Store()
    with store.lock():
        state = store.read_state()
        st = state["loops"]["quiet"]
        set_fields(st, status="paused", reason="rate_limited", resume_at=st.created + 99,
                       note="a note", outcomes=["ok", "failed"], cost_usd=1.5,
                       last_decision={"decision": "continue", "summary": "s", "evidence": None},
                       hook_error={"at": st.created, "message": "hook said no"},
                       notify_error={"at": st.created, "message": "no route"},
                       triggered={"count": 2, "at": st.created},
                       last_handoff={"handoff": "pushed", "branch": "b"})
        store.write_state(state)
    assert isinstance(reading.list_columns(Store()), dict)  # the columns path is taken

    def steady(info: dict[str, Any]) -> dict[str, Any]:
        info.pop("version", None)
        info.pop("deadline_remaining_s")
        return info

    listed = json.loads(in_process("ls", "--json").stdout)["loops"]
    assert [loop["name"] for loop in listed] == ["failing", "gated", "quiet"]
    for loop in listed:
        assert steady(loop) == steady(cli.json("status", loop["name"])), loop["name"]
    failing, gated, quiet = listed
    assert failing["last_run"]["outcome"] == "failed" and failing["last_run"]["reason"]
    assert gated["gate"]["argv"] == ["true"] and "secret" not in json.dumps(gated)
    assert quiet["rate_limited_until"] and quiet["hook_error"]["message"] == "hook said no"
    assert quiet["triggers_pending"] == 2 and quiet["recent_outcomes"] == ["ok", "failed"]
