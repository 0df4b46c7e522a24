"""`ls` and `status NAME` read the rows of the sealed definitions cache and
one line each of the cache and of state.json (commands/listing.py, issue 40)
instead of every definition and entry. They must say exactly what the full
read says, and take the full read whenever they could not."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from loop_state_support import set_fields

from conftest import in_process
from loopctl.commands import listing
from loopctl.commands import views as reading
from loopctl.domain.errors import LoopctlError
from loopctl.storage import defs_cache, statefile
from loopctl.storage.store import Store

# Every kind of schedule and start the rows must arm as the full read does:
# created_at or not, `after`, cron in a zone and in the system's, on demand.
LOOPS = """\
version: 1
loops:
  plain:
    prompt: p
    command: [/bin/true]
    every: 10m
    created_at: "2026-01-02T03:04:05Z"
  later:
    prompt: p
    command: [/bin/true]
    every: 1h
    after: 30m
    max_runs: 7
  zoned:
    prompt: p
    command: [/bin/true]
    cron: "*/5 * * * *"
    tz: Europe/Paris
    after: 1h
  local:
    prompt: p
    command: [/bin/true]
    cron: "0 3 * * *"
  asked:
    prompt: p
    command: [/bin/true]
    on_demand: true
  broken:
    prompt: p
    every: nope
  kept:
    prompt: p
    command: [/bin/true]
    every: 2h
    for: 3d
"""


def write_loops(home: Path, text: str = LOOPS) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "loops.yaml").write_text(text)
    assert in_process("ls").returncode == 0  # the first read saves the parsed copy


def full_read(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, dict[str, Any]]:
    """`list_brief` and every `status NAME` as the full read gives them."""
    with monkeypatch.context() as patch:
        patch.setattr(listing, "brief", lambda *a: None)
        patch.setattr(listing, "one", lambda *a: None)
        return listed()


def listed() -> tuple[Any, dict[str, Any]]:
    brief = reading.list_brief(Store())
    return brief, {row["name"]: reading.status(Store(), row["name"]).to_json() for row in brief}


@pytest.fixture(autouse=True)
def frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    """One clock for both reads: each arms new loops and counts
    `deadline_remaining_s` from it."""
    from loopctl import clock

    now = clock.now()
    monkeypatch.setattr(clock, "now", lambda: now)


def same(monkeypatch: pytest.MonkeyPatch) -> None:
    """The short paths answer, and say what the full read says."""
    brief = listing.brief(Store(), reading.last_reason)
    assert brief is not None, "took the full read"
    for name in [row["name"] for row in brief]:
        assert listing.one(Store(), name) is not None, f"status {name}: took the full read"
    assert listed() == full_read(monkeypatch)


def drive(home: Path) -> None:
    assert in_process("pause", "kept").returncode == 0  # a driver's write of state.json


def rewrite_state(change: Any) -> None:
    """Change entries as a driver would, written (and sealed) by the store."""
    store = Store()
    state = store.read_state()
    change(state["loops"])
    store.write_state(state)


def test_a_hand_written_file_never_driven(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_loops(home)
    assert not (home / "state" / "state.json").exists()
    same(monkeypatch)


def test_after_a_driver_with_runs_queues_checks_and_failures(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_loops(home)
    drive(home)

    def change(loops: dict[str, Any]) -> None:
        set_fields(loops["plain"], run={"run_id": "20260102T030405Z-0001", "started_at": 5.0},
                                   iterations=3, last_run_id="20260102T030405Z-0000",
                                   last_outcome="ok", last_check={
                                       "run_id": "20260102T030405Z-0000", "passed": False,
                                       "exit_code": 2})
        set_fields(loops["later"], queued_at=10.0, last_run_id="20260102T030405Z-0002",
                                   last_outcome="failed", failures=1)
        set_fields(loops["asked"], status="paused", reason="user", note="why\nnot")

    rewrite_state(change)
    same(monkeypatch)
    brief = {row["name"]: row for row in reading.list_brief(Store())}
    assert brief["plain"]["status"] == "running"
    assert brief["plain"]["last_reason"] == "not yet: check failed (exit 2)"
    assert brief["later"]["status"] == "queued"
    assert brief["broken"]["status"] == "invalid"


@pytest.mark.parametrize("edit", ["schedule", "for", "armed-nowhere"])
def test_an_entry_reconciling_would_change_takes_the_full_read(
        home: Path, monkeypatch: pytest.MonkeyPatch, edit: str) -> None:
    """The definition edited since the driver's pass (its state entry not yet
    re-armed), or an entry armed nowhere: what `ls` shows is what the next
    pass will make of it, as the full read reconciles it in memory."""
    write_loops(home)
    drive(home)
    if edit == "armed-nowhere":
        rewrite_state(lambda loops: set_fields(loops["plain"], next_due=None))
    else:
        old, new = ("every: 10m", "every: 20m") if edit == "schedule" else ("for: 3d", "for: 5d")
        write_loops(home, LOOPS.replace(old, new))
    assert listing.brief(Store(), reading.last_reason) is None
    assert listed() == full_read(monkeypatch)


def test_a_state_json_loopctl_did_not_write_takes_the_full_read(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its entries are checked (and repaired) by the full read: a planted
    state.json must not reach the table through the short path."""
    write_loops(home)
    drive(home)
    path = home / "state" / "state.json"
    state = json.loads(path.read_text())
    state["loops"]["plain"]["iterations"] = "many"
    path.write_text(json.dumps(state))
    assert listing.brief(Store(), reading.last_reason) is None
    assert listing.one(Store(), "plain") is None
    brief, statuses = listed()
    assert (brief, statuses) == full_read(monkeypatch)
    assert statuses["plain"]["reason"] == "error", "the damaged entry was not repaired"


def test_a_marked_account_takes_the_full_read(home: Path) -> None:
    write_loops(home)
    drive(home)
    store = Store()
    state = store.read_state()
    state["accounts"] = {"x": {"kind": "rate_limited"}}
    store.write_state(state)
    assert listing.brief(Store(), reading.last_reason) is None
    assert listing.one(Store(), "plain") is None
    assert listing.queued(Store()) is None


def test_the_queued_loops_are_read_from_their_lines_alone(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A queued loop's `slot 2/3` (`status NAME`) is worked out from the
    entries whose line holds `queued_at`, each reconciled as the full read
    would (`plain`'s schedule is edited after it queued): the same loops and
    due times as `list_brief`. Running, paused, and a `queued_at` in text or
    in a nested mapping are not queued."""
    write_loops(home)
    drive(home)

    def change(loops: dict[str, Any]) -> None:
        set_fields(loops["plain"], queued_at=12.0, note='"queued_at":1')
        set_fields(loops["later"], queued_at=10.0)
        set_fields(loops["zoned"], queued_at=11.0, run={"run_id": "20260102T030405Z-0001",
                                                        "started_at": 5.0})
        set_fields(loops["asked"], status="paused", reason="user", queued_at=9.0)
        set_fields(loops["kept"], last_handoff={"queued_at": 3.0})

    rewrite_state(change)
    write_loops(home, LOOPS.replace("every: 10m", "every: 20m"))
    fast = listing.queued(Store())
    assert fast is not None, "took the full read"
    brief, _ = full_read(monkeypatch)
    want = sorted((row["name"], row["next_fire"]) for row in brief if row["status"] == "queued")
    assert sorted((row["name"], row["next_fire"]) for row in fast) == want
    assert [name for name, _ in want] == ["later", "plain"]


def test_status_finds_its_loop_by_its_line_and_nothing_else(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What looks like another loop's line inside a value stays a value:
    text (JSON escapes its line breaks and quotes), and a mapping that holds
    the same key (`"later":{` in an entry, `{"name":"later"` in an env)."""
    fake = '\n"later":{"status":"stopped"},\n{"name":"later","every":1}'
    write_loops(home, LOOPS.replace("  later:\n    prompt: p\n",
                                    f"  later:\n    prompt: {json.dumps(fake)}\n")
                .replace("  plain:\n    prompt: p\n", f"  plain:\n    prompt: {json.dumps(fake)}\n"
                         "    env: {name: later, every: '1'}\n"))
    drive(home)
    rewrite_state(lambda loops: set_fields(
        loops["plain"], note=fake, last_handoff={"later": {"status": "stopped"}}))
    same(monkeypatch)
    assert reading.status(Store(), "later").status == "active"
    assert reading.status(Store(), "later").to_json()["schedule"]["every_s"] == 3600


def test_the_state_file_is_one_entry_a_line_and_reads_back(home: Path) -> None:
    entries = {"a": {"status": "active", "note": "x\ny"}, "b": {"status": "paused"}}
    data = statefile.encode_state({"version": 2, "busy": False}, entries)
    assert json.loads(data) == {"version": 2, "busy": False, "loops": entries}
    assert data.count(b"\n") == 2
    for name, entry in entries.items():
        assert statefile.entry_of(data, name) == ({"version": 2, "busy": False}, entry)
    assert statefile.entry_of(data, "c") == ({"version": 2, "busy": False}, None)
    assert json.loads(statefile.encode_state({"version": 2}, {})) == {"version": 2, "loops": {}}
    compact = json.dumps({"version": 2, "loops": entries}, separators=(",", ":")).encode()
    assert statefile.entry_of(compact, "a") is None, "another layout must be read whole"


def test_a_number_json_cannot_hold_is_refused_and_the_file_kept(home: Path) -> None:
    write_loops(home)
    drive(home)
    path = home / "state" / "state.json"
    before = path.read_bytes()
    store = Store()
    state = store.read_state()
    state["loops"]["plain"].cost_usd = math.nan
    with pytest.raises(LoopctlError, match="non-finite"):
        store.write_state(state)
    assert path.read_bytes() == before


def test_start_of_one_more_loop_extends_the_rows(home: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    write_loops(home)
    drive(home)
    assert in_process("start", "p", "--name", "added", "--every", "5m", "--command",
                      "/bin/true").returncode == 0
    parts = Store().cached_parts()
    assert parts is not None, "start left no usable cache"
    columns = defs_cache.rows(parts.rows)
    assert columns is not None and columns[0][-1] == "added" and columns[1][-1] == "every 5m"
    same(monkeypatch)
