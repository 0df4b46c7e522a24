"""Loop state shared in the team store (DESIGN §21 "What lives where"): a
pause anywhere is a pause everywhere, bounds hold across machines, a loop
defined on one machine is not dropped by another, and the rows are checked
like state.json. Several homes play several machines; every command is a
real process on a real PostgreSQL server."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from conftest import wait_for
from store.machines import Machine, machines

pytestmark = pytest.mark.real_processes

LOOP = """\
  {name}:
    prompt: {prompt}
    agent: shell
    every: {every}
    cwd: {cwd}
    timeout: 1m
{extra}"""


def home_text(dsn: str, loops: str, top: str = "") -> str:
    return f"version: 1\nstore: {dsn}\n{top}loops:\n{loops}"


def loop(name: str, cwd: Path, prompt: str, every: str = "1s", extra: str = "") -> str:
    return LOOP.format(name=name, prompt=json.dumps(prompt), every=every, cwd=cwd, extra=extra)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def rows(dsn: str) -> dict[str, dict[str, Any]]:
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT loop, entry FROM loopctl.loop_state").fetchall()
    return {name: entry for name, entry in found}


def tick(machine: Machine) -> dict[str, Any]:
    proc = machine.run("tick", "--wait", "--json")
    assert proc.returncode in (0, 75), proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def test_a_pause_on_one_machine_stops_the_others_and_a_resume_anywhere_restarts(
        tmp_path: Path, pg_dsn: str) -> None:
    ran = tmp_path / "ran"
    a, b = machines(tmp_path / "machines", 2)
    for m in (a, b):
        m.define(home_text(pg_dsn, loop("often", tmp_path, f"echo $LOOPCTL_MACHINE >> {ran}")))
    assert a.run("store", "init").returncode == 0
    assert a.run("pause", "often").returncode == 0
    ticked = tick(b)
    assert not ticked["fired"] and ticked["skipped"] == [{"loop": "often",
                                                          "reason": "paused: user"}], ticked
    assert not ran.exists()
    assert b.run("resume", "often").returncode == 0
    assert len(tick(a)["fired"]) == 1
    assert lines(ran) == ["m1"]
    # No local state file decides anything: the team's is in the store.
    assert not (a.home / "loopctl" / "state" / "state.json").exists()
    assert not (a.home / "loopctl" / "state" / "summary.json").exists()


@pytest.mark.slow
def test_max_runs_holds_across_three_machines_ticking_at_once(tmp_path: Path,
                                                              pg_dsn: str) -> None:
    ran, runs = tmp_path / "ran", 7
    group = machines(tmp_path / "machines", 3)
    body = f"echo $LOOPCTL_RUN_ID $LOOPCTL_MACHINE >> {ran}"
    for m in group:
        m.define(home_text(pg_dsn, loop("bounded", tmp_path, body, "1s",
                                        f"    max_runs: {runs}\n")))
    assert group[0].run("store", "init").returncode == 0
    errors: list[str] = []

    def ticking(machine: Machine) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            proc = machine.run("tick", "--wait", "--json")
            if proc.returncode not in (0, 75) or "Traceback" in proc.stderr:
                errors.append(proc.stderr)
                return
            entry = rows(pg_dsn).get("bounded")
            if entry and entry.get("status") not in (None, "active") and not entry.get("run"):
                return

    threads = [threading.Thread(target=ticking, args=(m,)) for m in group]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    done = lines(ran)
    assert len(done) == runs, done
    assert len({line.split()[0] for line in done}) == runs  # each run once
    status = json.loads(group[1].run("status", "bounded", "--json").stdout)
    assert status["runs"]["used"] == runs, status


def test_max_concurrent_is_one_cap_across_machines(tmp_path: Path, pg_dsn: str) -> None:
    gate, ran = tmp_path / "go", tmp_path / "ran"
    body = f"echo start $LOOPCTL_MACHINE >> {ran}; while [ ! -e {gate} ]; do sleep 0.05; done"
    # B in a pid namespace of its own: A's pids are not even visible there.
    a, b = Machine("m1", tmp_path / "m1"), Machine("m2", tmp_path / "m2", own_pids=True)
    loops = loop("one", tmp_path, body, "1h") + loop("two", tmp_path, body, "1h")
    text = home_text(pg_dsn, loops, top="max_concurrent: 1\n")
    for m in (a, b):
        m.define(text)
    assert a.run("store", "init").returncode == 0
    first = json.loads(a.run("tick", "--json").stdout)
    assert len(first["fired"]) == 1, first
    wait_for(lambda: lines(ran), timeout=30)
    # B's pass counts A's run in flight (by its claim: A's pids mean nothing here).
    second = json.loads(b.run("tick", "--json").stdout)
    assert not second["fired"], second
    assert [q["loop"] for q in second["queued"]] != [], second
    gate.touch()
    wait_for(lambda: not rows(pg_dsn)[first["fired"][0]["loop"]].get("run"), timeout=30)
    third = json.loads(b.run("tick", "--wait", "--json").stdout)
    assert len(third["fired"]) == 1, third
    assert [line.split()[1] for line in lines(ran)] == ["m1", "m2"]


def test_a_loop_defined_on_one_machine_is_not_dropped_by_another(tmp_path: Path,
                                                                 pg_dsn: str) -> None:
    a, b = machines(tmp_path / "machines", 2)
    mine = loop("mine", tmp_path, "true", "1h")
    a.define(home_text(pg_dsn, mine + loop("common", tmp_path, "true", "1h")))
    b.define(home_text(pg_dsn, loop("common", tmp_path, "true", "1h")))
    assert a.run("store", "init").returncode == 0
    assert a.run("pause", "mine").returncode == 0
    assert b.run("tick", "--json").returncode == 0
    assert b.run("pause", "common").returncode == 0  # a write of B's state
    assert rows(pg_dsn)["mine"]["status"] == "paused"
    # `rm` drops it, from any machine.
    removed = b.run("rm", "mine")
    assert removed.returncode == 0, removed.stderr
    assert "mine" not in rows(pg_dsn)


def test_a_damaged_row_is_repaired_as_a_damaged_state_file_is(tmp_path: Path,
                                                              pg_dsn: str) -> None:
    """The store is untrusted input too: a row whose run names a flag-shaped
    value, or is not an object at all, is reset and the loop paused."""
    [a] = machines(tmp_path / "machines", 1)
    a.define(home_text(pg_dsn, loop("often", tmp_path, "true", "1h")))
    assert a.run("store", "init").returncode == 0
    assert a.run("pause", "often").returncode == 0
    with psycopg.connect(pg_dsn) as conn:
        conn.execute("UPDATE loopctl.loop_state SET entry = jsonb_set(entry, '{seq}', "
                     "'\"--exec=evil\"')")
        conn.execute("INSERT INTO loopctl.loop_state (loop, entry, updated_by) VALUES "
                     "('../x', '[]', 'm9')")
    status = a.run("status", "often", "--json")
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)
    assert shown["status"] == "paused" and shown["reason"] == "error", shown
    assert "bad values for seq" in shown["note"], shown
    listed = a.run("ls", "--json")
    assert listed.returncode == 0 and "../x" not in listed.stdout, listed.stderr


@pytest.mark.slow
def test_each_committed_change_notifies_its_loop(tmp_path: Path, pg_dsn: str) -> None:
    [a] = machines(tmp_path / "machines", 1)
    a.define(home_text(pg_dsn, loop("often", tmp_path, "true", "1h")
                       + loop("other", tmp_path, "true", "1h")))
    assert a.run("store", "init").returncode == 0
    assert a.run("pause", "other").returncode == 0  # both rows written
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("LISTEN loopctl_wake")
        assert a.run("status").returncode == 0  # a reader: writes nothing
        # Only the rows that changed are written and announced.
        assert a.run("pause", "often").returncode == 0
        # (The command's own wake, engine/store_wake.tell_others, may name it again.)
        assert {n.payload for n in conn.notifies(timeout=2, stop_after=3)} == {"often"}
        assert a.run("resume", "other").returncode == 0
        assert {n.payload for n in conn.notifies(timeout=2, stop_after=3)} == {"other"}


def test_the_team_s_top_level_keys_are_shared_and_each_machine_s_own_kept(
        pg_dsn: str) -> None:
    """The account holds are the team's; `defs_sig` (the loops.yaml this
    machine reconciled) is each machine's own."""
    from loopctl.storage.pg.connect import connect
    from loopctl.storage.pg.schema import migrate
    from loopctl.storage.pg.state import SharedState

    conn = connect(pg_dsn)
    migrate(conn, "test", pg_dsn)
    conn.close()
    holds = {"acct": {"kind": "usage_limit", "until": 1.5}}
    one, two = SharedState(pg_dsn, "m1"), SharedState(pg_dsn, "m2")
    one.begin()
    one.read()
    one.write({"defs_sig": [1, 2], "accounts": holds, "wake_at": 3.0}, {})
    one.end()
    assert two.read()[0] == {"accounts": holds}
    assert one.read()[0] == {"defs_sig": [1, 2], "accounts": holds}
    two.begin()
    two.read()
    two.write({"defs_sig": [9]}, {})  # the holds cleared by the team
    two.end()
    assert one.read()[0] == {"defs_sig": [1, 2]}
    one.close()
    two.close()


def test_the_account_marks_go_to_the_team_as_their_entries_and_come_back_the_same(
        pg_dsn: str) -> None:
    """A pass's marks are records (domain.accounts.AccountMark): the team
    store's `team_state` row holds their entries, which every machine reads
    back as the same marks (the row is checked like state.json's)."""
    from loopctl.domain import accounts
    from loopctl.storage.pg.connect import connect
    from loopctl.storage.pg.schema import migrate
    from loopctl.storage.pg.state import SharedState
    from loopctl.storage.shared import write_entries

    conn = connect(pg_dsn)
    migrate(conn, "test", pg_dsn)
    conn.close()
    table: accounts.Table = {}
    accounts.mark(table, "a" * 24, accounts.RATE_LIMITED, preset="claude", loop="x",
                  run_id="20270115T080000Z-0007", until=1_800_003_600.5, error="limit",
                  fix="wait", now=1_800_000_000.0)
    one, two = SharedState(pg_dsn, "m1"), SharedState(pg_dsn, "m2")
    one.begin()
    one.read()
    write_entries(one, {"loops": {}, "accounts": table})
    one.end()
    read = two.read()[0]["accounts"]
    assert read == {"a" * 24: table["a" * 24].to_json()}
    assert accounts.clean_table(read) == table
    one.close()
    two.close()
