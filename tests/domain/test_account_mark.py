"""An account's mark is a typed record (issue 52 item 2), AccountMark:
state.json's `accounts` is byte for byte what loopctl wrote when each mark
was a mapping (GOLDEN: main's state.json text of the same marks at
bf586f0), a written table reads back as the same records, and a hostile
entry is dropped or cleaned field by field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loopctl.domain import accounts
from loopctl.domain.accounts import AccountMark, clean_table, table_json
from loopctl.domain.model import LoopDef
from loopctl.domain.state import new_loop_state
from loopctl.domain.timestamps import UTC
from loopctl.storage.atomic import strict_json
from loopctl.storage.paths import Paths
from loopctl.storage.store import Store

NOW = 1_800_000_000.0
GOLDEN = (
    '{"aaaaaaaaaaaaaaaaaaaaaaaa":{"kind":"rate_limited","preset":"claude",'
    '"since":1800000000.0,"until":1800003600.5,"loop":"x","run_id":"20270115T080000Z-0007",'
    '"error":"usage limit reached","fix":"wait","loops":["x","z"],"probe":null},'
    '"bbbbbbbbbbbbbbbbbbbbbbbb":{"kind":"auth_required","preset":"codex",'
    '"since":1800000001.0,"until":null,"loop":"y","run_id":"20270115T080000Z-0008",'
    '"error":null,"fix":"run `codex login`","loops":["y"],"probe":"y"}}')


def marked() -> accounts.Table:
    """Two marks as runs leave them: a limit that then held a second loop,
    a login `resume` let one loop probe."""
    table: accounts.Table = {}
    accounts.mark(table, "a" * 24, accounts.RATE_LIMITED, preset="claude", loop="x",
                  run_id="20270115T080000Z-0007", until=NOW + 3600.5,
                  error="usage limit reached", fix="wait", now=NOW)
    accounts.mark(table, "b" * 24, accounts.AUTH_REQUIRED, preset="codex", loop="y",
                  run_id="20270115T080000Z-0008", until=None, error=None,
                  fix="run `codex login`", now=NOW + 1)
    accounts.hold(new_loop_state(LoopDef(name="z"), NOW, zone=UTC), table["a" * 24], "z")
    accounts.probe(table, "y")
    return table


def test_the_marks_are_written_as_main_wrote_them_and_read_back_the_same() -> None:
    table = marked()
    assert strict_json(table_json(table), sort_keys=False) == GOLDEN
    again = clean_table(json.loads(GOLDEN))
    assert again == table and strict_json(table_json(again), sort_keys=False) == GOLDEN


def test_state_json_holds_those_bytes(tmp_path: Path) -> None:
    store = Store(Paths(tmp_path / "config", tmp_path / "state"))
    store.write_state({"loops": {}, "accounts": marked()})
    data = (tmp_path / "state" / "state.json").read_text()
    assert f'"accounts":{GOLDEN}' in data
    assert clean_table(store.read_state()["accounts"]) == marked()


def test_a_table_read_and_not_checked_is_written_back_as_it_was() -> None:
    raw = {"x": {"kind": "rate_limited", "until": "soon"}}  # not checked: not rewritten
    assert table_json(raw) == raw and table_json(None) is None


def test_a_mark_already_checked_is_kept_as_it_is() -> None:
    table = marked()
    assert all(a is b for a, b in zip(clean_table(table).values(), table.values(),
                                      strict=True))


GOOD: dict[str, Any] = json.loads(GOLDEN)["a" * 24]


@pytest.mark.parametrize("change", [
    {"kind": "usage_limit"}, {"preset": "../bin/sh"}, {"since": True}, {"since": None},
    {"since": float("inf")}, {"until": "soon"}, {"until": -1.0}, {"loops": "x"},
    {"loops": [1]}, {"loops": ["x", "../y"]}, {"loops": None},
], ids=repr)
def test_a_hostile_mark_is_dropped(change: dict[str, Any]) -> None:
    assert list(clean_table({"a" * 24: GOOD})) == ["a" * 24]
    assert clean_table({"a" * 24: {**GOOD, **change}}) == {}


@pytest.mark.parametrize("account", ["A" * 24, "a" * 23, "a" * 25, "g" * 24, 7, "../" * 8])
def test_a_mark_under_no_account_id_is_dropped(account: Any) -> None:
    assert clean_table({account: GOOD}) == {}


def test_what_a_human_is_shown_of_a_mark_is_cleaned_field_by_field() -> None:
    [mark] = clean_table({"a" * 24: {
        **GOOD, "error": "\x1b]52;c;evil\x07limit\nhit", "fix": "\u202ewait", "loop": "../x",
        "run_id": "--flag", "probe": "a b", "loops": ["x"] * 300}}).values()
    assert mark == AccountMark(kind="rate_limited", preset="claude", since=NOW,
                               until=NOW + 3600.5, loop=None, run_id=None,
                               error="limit hit", fix="wait", loops=["x"] * 200, probe=None)
