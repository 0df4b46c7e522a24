"""Slot claims across machines (DESIGN §20-21), on a real PostgreSQL server:
each (loop, slot) is claimed once in the store whatever the machine, in the
same pass that decides the fire and before any agent starts; each claim
records the machine and the definition's digest; a machine whose loops.yaml
differs for the loop does not fire it and says why."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psycopg
import pytest

from loopctl.domain.timestamps import iso
from store.machines import Machine, hourly, machines

pytestmark = pytest.mark.real_processes

BODY = "echo $LOOPCTL_RUN_ID $LOOPCTL_MACHINE >> {ran}"


def team(tmp_path: Path, dsn: str, count: int,
         own_pids: bool = False) -> tuple[list[Machine], Path]:
    ran = tmp_path / "ran"
    group = machines(tmp_path / "machines", count, own_pids)
    for machine in group:
        machine.define(hourly(dsn, tmp_path, BODY.format(ran=ran)))
    init = group[0].run("store", "init")
    assert init.returncode == 0, init.stderr
    return group, ran


def bodies(ran: Path) -> list[str]:
    return ran.read_text().splitlines() if ran.exists() else []


def past_hour(hours_back: int) -> str:
    return iso((int(time.time()) // 3600 - hours_back) * 3600)


def claims(dsn: str) -> list[tuple[str, str, str, str]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT loop, slot, machine, digest FROM loopctl.slot_claims "
                            "ORDER BY slot").fetchall()


def test_run_scheduled_on_three_machines_at_once_runs_the_slot_once(tmp_path: Path,
                                                                    pg_dsn: str) -> None:
    group, ran = team(tmp_path, pg_dsn, 3)
    slot = past_hour(2)
    procs = [m.popen("run", "hourly", "--scheduled", "--slot", slot) for m in group]
    outs = [p.communicate(timeout=60) for p in procs]
    assert len(bodies(ran)) == 1, bodies(ran)
    run_id, winner = bodies(ran)[0].split()
    # The loop's state is the team's (DESIGN §21): the two others are refused
    # as a second `run --scheduled` in one home is (tests/engine/test_slot_race):
    # the slot already ran (exit 0), or its run is still in flight (exit 75).
    codes = sorted(p.returncode for p in procs)
    assert codes[0] == 0 and codes[1:] in ([0, 0], [0, 75], [75, 75]), outs
    for machine, proc, (_, err) in zip(group, procs, outs, strict=True):
        if machine.name == winner:
            assert proc.returncode == 0, outs
            continue
        said = f"slot {slot} already ran: run {run_id}" if proc.returncode == 0 \
            else f"has a run in flight ({run_id})"
        assert said in err, outs
    [(loop, taken, machine, digest)] = claims(pg_dsn)
    assert (loop, taken, machine) == ("hourly", f"schedule:{slot}", winner) and len(digest) == 32
    # The record, and `history`, name the machine that ran it.
    ran_on = next(m for m in group if m.name == winner)
    [record] = json.loads(ran_on.run("history", "hourly", "--json").stdout)["runs"]
    assert record["machine"] == winner and record["slot"] == f"schedule:{slot}"
    table = ran_on.run("history", "hourly").stdout.splitlines()
    assert table[0].split()[-1] == "MACHINE" and table[1].split()[-1] == winner


def test_ticks_on_three_machines_fire_a_due_slot_once(tmp_path: Path, pg_dsn: str) -> None:
    """Each machine in a pid namespace of its own (its tick is pid 1 there)."""
    group, ran = team(tmp_path, pg_dsn, 3, own_pids=True)
    procs = [m.popen("tick", "--wait", "--json") for m in group]
    outs = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    fired = [f for out in outs for f in out["fired"]]
    assert len(fired) == 1 and len(bodies(ran)) == 1, outs
    said = [s["reason"] for out in outs for s in out["skipped"]]
    # The loop's state is the team's: a tick after the winner's sees its run
    # in flight (or served); one racing it is refused by the slot's claim.
    run_id = fired[0]["run_id"]
    assert len(said) == 2 and all("already ran: run " in s or s == f"running ({run_id})"
                                  or s == "not due" for s in said), said
    # The slot is remembered where it did not run: a later fire of it refuses there.
    loser = next(m for m, out in zip(group, outs, strict=True) if not out["fired"])
    again = loser.run("run", "hourly", "--scheduled", "--slot", fired[0]["slot"][9:])
    assert again.returncode == 0 and "already ran: run" in again.stderr
    assert len(bodies(ran)) == 1


def test_a_machine_whose_definition_differs_does_not_fire(
        tmp_path: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    (m1, m2), ran = team(tmp_path, pg_dsn, 2)
    assert m1.run("run", "hourly", "--scheduled", "--slot", past_hour(5)).returncode == 0
    m2.define(hourly(pg_dsn, tmp_path, BODY.format(ran=ran) + " # edited on m2 only"))
    # An hour on, the team's next slot is due (its state says m1 served the last).
    monkeypatch.setenv("LOOPCTL_CLOCK_OFFSET", "3600")
    ticked = json.loads(m2.run("tick", "--json").stdout)
    monkeypatch.delenv("LOOPCTL_CLOCK_OFFSET")
    assert not ticked["fired"]
    assert ticked["skipped"] == [{"loop": "hourly", "reason": "definition differs from the "
                                  "one machine m1 last ran"}]
    refused = m2.run("run", "hourly", "--scheduled", "--slot", past_hour(4))
    assert refused.returncode == 3, refused.stderr
    assert refused.stderr.strip() == ("loopctl: error: not firing hourly: definition differs "
                                      "from the one machine m1 last ran; make loops.yaml here "
                                      "match the team's")
    skipped = json.loads(m2.run("history", "hourly", "--skipped", "--json").stdout)
    assert "definition_differs" in json.dumps(skipped)
    assert len(bodies(ran)) == 1


def test_the_machine_that_changed_its_definition_leads_and_the_others_follow(
        tmp_path: Path, pg_dsn: str) -> None:
    """An edit made (or pulled) on one machine is the team's from its next
    run; a machine still on the old one is refused until it has the new."""
    (m1, m2), ran = team(tmp_path, pg_dsn, 2)
    assert m1.run("run", "hourly", "--scheduled", "--slot", past_hour(6)).returncode == 0
    assert m2.run("run", "hourly", "--scheduled", "--slot", past_hour(5)).returncode == 0
    new = hourly(pg_dsn, tmp_path, BODY.format(ran=ran) + " # v2")
    m1.define(new)
    assert m1.run("run", "hourly", "--scheduled", "--slot", past_hour(4)).returncode == 0
    stale = m2.run("run", "hourly", "--scheduled", "--slot", past_hour(3))
    assert stale.returncode == 3 and "machine m1 last ran" in stale.stderr
    m2.define(new)
    # The refused slot is on record as skipped there; the next one runs.
    assert m2.run("run", "hourly", "--scheduled", "--slot", past_hour(2)).returncode == 0
    assert [line.split()[1] for line in bodies(ran)] == ["m1", "m2", "m1", "m2"]


def test_machines_globs_choose_where_a_loop_fires(tmp_path: Path, pg_dsn: str) -> None:
    ran = tmp_path / "ran"
    laptop, runner = (Machine(n, tmp_path / n) for n in ("laptop-ann", "runner-a"))
    text = hourly(pg_dsn, tmp_path, BODY.format(ran=ran), "    machines: [runner-*, rnner-*]\n")
    for machine in (laptop, runner):
        machine.define(text)
    assert laptop.run("store", "init").returncode == 0
    ticked = json.loads(laptop.run("tick", "--json").stdout)
    assert not ticked["fired"] and ticked["skipped"] == [
        {"loop": "hourly", "reason": "not for machine laptop-ann (machines: runner-*, rnner-*)"}]
    slot = past_hour(2)
    scheduled = laptop.run("run", "hourly", "--scheduled", "--slot", slot)
    assert scheduled.returncode == 0 and "not for machine laptop-ann" in scheduled.stderr
    assert not bodies(ran) and not claims(pg_dsn)  # the slots stay free for the runners
    assert runner.run("run", "hourly", "--scheduled", "--slot", slot).returncode == 0
    assert [line.split()[1] for line in bodies(ran)] == ["runner-a"]
    status = laptop.run("store", "status")
    assert status.returncode == 0
    assert status.stderr.strip() == ("loopctl: warning: loop hourly: machines glob 'rnner-*' "
                                     "matches no machine (known: laptop-ann, runner-a)")
