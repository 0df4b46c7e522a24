"""`ls --json` reads the definitions cache's rows and listed fields and the
packed state entries a field at a time (commands/listing.loop_readers)
instead of every LoopDef and reconciled entry. What it prints must be, byte
for byte, what the full read prints, and it must take the full read
whenever it could not say the same."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from loop_state_support import set_fields

from conftest import in_process
from loopctl.commands import listing
from loopctl.storage.store import Store

# Every kind of schedule (interval, after, cron in a zone and in the
# system's, on demand, auto, a `for`), and a loop holding every definition
# field the LOOP object shows at other than its default.
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
    command: [/bin/true, "-x"]
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
    env: {TOKEN: secret}
  kept:
    prompt: p
    command: [/bin/true]
    every: 2h
    for: 3d
  rich:
    prompt: p
    agent: claude
    fallback_agent: codex
    every: auto
    max_runs: 9
    max_failures: 4
    max_deferrals: 2
    budget_usd: 2.5
    cwd: /tmp
    worktree: true
    base: main
    branch_prefix: loop/
    push: origin
    pr: true
    merge: squash
    fix_attempts: 3
    protect: [tests/, README.md]
    notes: true
    if: [/bin/true, "x"]
    if_timeout: 30s
    check: [pytest, -q]
    check_timeout: 5m
    until_check: true
    check_metric: "score=([0-9.]+)"
    on_github: [issue_comment]
    github_repo: o/r
    github_command: /go
    github_anyone: true
"""

BROKEN = "  broken:\n    prompt: p\n    every: nope\n"


@pytest.fixture(autouse=True)
def frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    """One clock for both reads: each arms new loops and counts
    `deadline_remaining_s` from it."""
    from loopctl import clock

    now = clock.now()
    monkeypatch.setattr(clock, "now", lambda: now)


def write_loops(home: Path, text: str = LOOPS) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "loops.yaml").write_text(text)
    assert in_process("ls").returncode == 0  # the first read saves the parsed copy


def ls_json() -> str:
    done = in_process("ls", "--json")
    assert done.returncode == 0, done.stderr
    return done.stdout


def full_read(monkeypatch: pytest.MonkeyPatch) -> str:
    with monkeypatch.context() as patch:
        patch.setattr(listing, "loop_readers", lambda *a: None)
        return ls_json()


def same(monkeypatch: pytest.MonkeyPatch, short: bool = True) -> dict[str, Any]:
    """`ls --json` prints what the full read prints; `short`: by the short
    path (else: it gave way to the full read). The loops, by name."""
    taken = listing.loop_readers(Store()) is not None
    assert taken == short, "took the full read" if short else "took the short path"
    fast = ls_json()
    assert fast == full_read(monkeypatch)
    std = json.dumps(json.loads(fast), indent=2, default=str, allow_nan=False)
    assert fast == std + "\n", "not the standard library's text"
    return {loop["name"]: loop for loop in json.loads(fast)["loops"]}


def rewrite_state(change: Any) -> None:
    """Change entries as a driver would, written (and sealed) by the store."""
    store = Store()
    state = store.read_state()
    change(state["loops"])
    store.write_state(state)


RUN_ID = "20260102T030405Z-00"


def lived(loops: dict[str, Any]) -> None:
    """Entries as runs, queues, pauses and deliveries leave them."""
    set_fields(loops["plain"], run={"run_id": RUN_ID + "01", "started_at": 5.0}, iterations=3,
                               last_run_id=RUN_ID + "00", last_outcome="ok", last_end=4.5,
                               outcomes=["ok", "failed", "ok"], cost_usd=1.25, cost_estimated=True,
                               last_check={"run_id": RUN_ID + "00", "passed": False,
                                           "exit_code": 2})
    set_fields(loops["later"], queued_at=10.0, last_run_id=RUN_ID + "02", last_outcome="failed",
                               last_end=9.0, failures=1, deferrals=2, pending=True,
                               after_run="pause", triggered={"count": 2, "at": 8.0})
    set_fields(loops["asked"], status="paused", reason="user", note="why\nnot",
                               hook_error={"at": 3.0, "message": "hook exited 1"},
                               notify_error={"at": 4.0, "message": "no route"})
    set_fields(loops["zoned"], status="paused", reason="rate_limited", resume_at=4e9,
                               last_handoff={"branch": "loop/x", "commits": 2, "pushed": True})
    set_fields(loops["kept"], status="completed", reason="max_runs", ended_at=7.0,
                              observed_at=7.5, next_due=None)
    set_fields(loops["rich"], last_decision={"kind": "continue", "summary": "s", "at": 6.0})


def test_a_hand_written_file_never_driven(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_loops(home)
    assert not (home / "state" / "state.json").exists()
    loops = same(monkeypatch)
    assert loops["rich"]["workspace"]["protect"] == ["tests/", "README.md"]
    assert loops["rich"]["check"]["timeout_s"] == 300
    assert loops["later"]["command"] == ["/bin/true", "-x"]


def test_after_a_driver_with_runs_queues_pauses_and_deliveries(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_loops(home)
    assert in_process("pause", "kept").returncode == 0  # a driver's write of state.json
    rewrite_state(lived)
    loops = same(monkeypatch)
    assert loops["plain"]["status"] == "running"
    assert loops["plain"]["last_run"]["reason"] == "not yet: check failed (exit 2)"
    assert loops["later"]["status"] == "queued" and loops["later"]["triggers_pending"] == 2
    assert loops["zoned"]["rate_limited_until"] is not None
    assert loops["asked"]["hook_error"]["message"] == "hook exited 1"


def test_loops_alike_share_their_values_and_still_say_the_same(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many loops holding one value each (what the short path writes once)
    beside one that differs in each field."""
    many = "".join(f"  same{at}:\n    prompt: p\n    command: [/bin/true]\n    every: 1h\n"
                   f"    after: 1h\n    created_at: \"2026-01-02T03:04:05Z\"\n"
                   for at in range(6))
    write_loops(home, LOOPS + many)
    same(monkeypatch)
    assert in_process("pause", "same0").returncode == 0
    rewrite_state(lambda loops: set_fields(loops["same1"], cost_usd=0, failures=False))
    same(monkeypatch)


def test_values_equal_but_written_apart_are_written_apart(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Loops alike but in one field, whose values are equal (`0 == 0.0`)
    and written apart: each loop's own."""
    many = "".join(f"  same{at}:\n    prompt: p\n    command: [/bin/true]\n    every: 1h\n"
                   for at in range(4))
    write_loops(home, "version: 1\nloops:\n" + many)
    assert in_process("pause", "same3").returncode == 0
    rewrite_state(lambda loops: set_fields(loops["same2"], cost_usd=0))
    spent = [loop["cost_usd"]["spent"] for loop in same(monkeypatch).values()]
    assert list(map(repr, spent)) == ["0.0", "0.0", "0", "0.0"]
    from loopctl.commands.loop_object import uniform

    assert [uniform(column) for column in ([0.0, -0.0], [-0.0, 0.0], [0, 0.0], [2.5, 2.5],
                                           [-0.0, -0.0], [1, True])] == [
        False, False, False, True, True, False]


def test_start_of_one_more_loop_extends_the_listed_fields(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_loops(home)
    assert in_process("pause", "kept").returncode == 0
    assert in_process("start", "p", "--name", "added", "--every", "5m", "--command",
                      "/bin/true", "--max-failures", "6", "--cwd", "/").returncode == 0
    loops = same(monkeypatch)
    assert loops["added"]["failures"]["limit"] == 6 and loops["added"]["cwd"] == "/"


def test_invalid_loops_keep_their_place(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The LOOP objects a list, an invalid loop's three fields where it is
    in the file: first, between and last."""
    write_loops(home, LOOPS.replace("loops:\n", "loops:\n" + BROKEN.replace("broken", "first"))
                .replace("  kept:\n", BROKEN + "  kept:\n") + BROKEN.replace("broken", "last"))
    assert in_process("pause", "kept").returncode == 0
    rewrite_state(lived)
    loops = same(monkeypatch)
    assert list(loops)[:2] == ["first", "plain"] and list(loops)[-3:] == ["kept", "rich", "last"]
    assert loops["broken"] == {"name": "broken", "status": "invalid",
                               "error": loops["broken"]["error"]}
    assert loops["plain"]["last_run"]["reason"] == "not yet: check failed (exit 2)"


def alike(count: int, budget: str = "2") -> str:
    return "".join(f"  a{at}:\n    prompt: p\n    command: [/bin/true]\n    cwd: /tmp\n"
                   f"    every: 1h\n    budget_usd: {budget}\n" for at in range(count))


def listed_line() -> dict[str, Any]:
    parts = Store().cached_parts()
    assert parts is not None, "no usable cache"
    return dict(json.loads(parts.listed))


def test_one_value_in_every_loop_is_kept_once_until_a_loop_differs(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_loops(home, "version: 1\nloops:\n" + alike(3))
    assert listed_line() == {"every": {"all": 3600}, "command": {"all": ["/bin/true"]},
                             "cwd": {"all": "/tmp"}, "budget_usd": {"all": 2}}
    same(monkeypatch)
    start = ("start", "p", "--every", "1h", "--budget-usd", "2", "--cwd", "/tmp")
    assert in_process(*start, "--name", "b0", "--command", "/bin/true").returncode == 0
    assert listed_line()["command"] == {"all": ["/bin/true"]}
    same(monkeypatch)
    assert in_process(*start, "--name", "b1", "--command", "/bin/false").returncode == 0
    assert listed_line()["command"] == [["/bin/true"]] * 4 + [["/bin/false"]]
    loops = same(monkeypatch)
    assert loops["b1"]["command"] == ["/bin/false"] and loops["a0"]["cost_usd"]["budget"] == 2


def test_equal_values_written_apart_keep_a_column() -> None:
    """`2 == 2.0 == True`, but JSON writes them apart: not one value, in the
    line written whole and in one extended by a loop (`start`)."""
    from loopctl.domain.model import LoopDef
    from loopctl.storage import defs_cache

    loops = {name: LoopDef(name=name, budget_usd=budget, every=60)
             for name, budget in (("a", 2), ("b", 2.0))}
    fields = defs_cache.listed_fields(list(loops.values()))
    assert fields == {"every": {"all": 60}, "budget_usd": [2, 2.0]}
    assert list(map(type, fields["budget_usd"])) == [int, float]
    parsed = defs_cache.Parsed(loops={"a": loops["a"]}, names=["a"])
    data = defs_cache.encode("k", parsed)
    assert data is not None
    body = defs_cache.extended(data, loops["b"])
    assert body is not None
    assert list(map(type, json.loads(body[1])["budget_usd"])) == [int, float]
    assert json.loads(body[1])["every"] == {"all": 60}
    assert defs_cache.listed(body[1], 2) == {"every": (60,), "budget_usd": [2, 2.0]}


@pytest.mark.parametrize("case", ["held", "notify", "unsealed", "planted", "edited"])
def test_what_the_short_path_cannot_say_takes_the_full_read(
        home: Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    """An account marked (held loops), notification URLs (no cache), a
    state.json loopctl did not write as it is (repaired), a cache whose
    seal does not hold its listed fields (a planted command), a schedule
    edited since the driver's pass (re-armed in memory)."""
    write_loops(home, LOOPS.replace("    every: 2h\n", "    every: 2h\n    notify: [https://x/a]\n")
                if case == "notify" else LOOPS)
    assert in_process("pause", "kept").returncode == 0
    rewrite_state(lived)
    if case == "held":
        store = Store()
        state = store.read_state()
        state["accounts"] = {"x": {"kind": "rate_limited", "until": 4e9}}
        store.write_state(state)
    elif case == "unsealed":
        path = home / "state" / "state.json"
        state = json.loads(path.read_text())
        state["loops"]["plain"]["iterations"] = "many"
        path.write_text(json.dumps(state))
    elif case == "planted":
        path = home / "state" / "defs-cache.json"
        data = path.read_bytes()
        assert b'"listed":{' in data and b'"-x"' in data
        path.write_bytes(data.replace(b'"-x"', b'"--planted"'))
    elif case == "edited":
        write_loops(home, LOOPS.replace("every: 10m", "every: 20m"))
    loops = same(monkeypatch, short=False)
    assert loops["later"]["command"] == ["/bin/true", "-x"]
    if case == "unsealed":
        assert loops["plain"]["reason"] == "error", "the damaged entry was not repaired"
