"""One run per slot with real processes (DESIGN §20, issue 50): cron-style
`tick`s, a daemon and `run --scheduled` (with and without `--slot`) started
together for one slot of an hourly loop give one run, and nothing serves the
slot again, not even with the clock stepped back. The clock is moved with
LOOPCTL_CLOCK_OFFSET: every driver sees 30 s past the loop's first slot."""

from __future__ import annotations

import math
import subprocess
import time

from conftest import CLI, agent_command, wait_for
from loopctl.domain.timestamps import iso


def offset_to(instant: float) -> dict[str, str]:
    return {"LOOPCTL_CLOCK_OFFSET": repr(instant - time.time())}


def start_hourly(cli: CLI) -> float:
    """An hourly loop made now; its first slot, the next hour."""
    cli("start", "p", "--name", "hourly", "--cron", "0 * * * *", "--tz", "UTC",
        "--command", agent_command("--print", "served"), check=0)
    return math.floor(time.time() / 3600 + 1) * 3600


def test_ticks_a_daemon_and_run_scheduled_racing_for_one_slot_give_one_run(cli: CLI) -> None:
    slot = start_hourly(cli)
    env = offset_to(slot + 30)
    stamp = iso(slot)
    assert stamp is not None
    procs = [cli.popen("daemon", "--quiet", env=env, stderr=subprocess.PIPE,
                       stdout=subprocess.PIPE)]
    drivers = [cli.popen(*args, env=env, stderr=subprocess.PIPE, stdout=subprocess.PIPE)
               for args in (("tick",), ("run", "hourly", "--scheduled"), ("tick",),
                            ("run", "hourly", "--scheduled", "--slot", stamp), ("tick",))]
    try:
        for proc in drivers:
            proc.wait(timeout=30)
        wait_for(lambda: len(cli.records("hourly")) == 1
                 and not cli.state()["loops"]["hourly"]["run"])
    finally:
        procs[0].terminate()
        procs[0].wait(timeout=15)
    outcomes = [(p.returncode, p.stderr.read() if p.stderr else "") for p in drivers]
    for code, err in outcomes:  # ran it, stood aside, found it in flight or served
        assert code in (0, 75) and "Traceback" not in err, outcomes
    (record,) = cli.records("hourly")
    assert record["slot"] == f"schedule:{stamp}" and record["due_at"] == stamp
    assert record["trigger"] == "schedule" and record["outcome"] == "ok"
    # Served: a late scheduler, a tick and the clock stepped back all refuse it.
    again = cli("run", "hourly", "--scheduled", env=offset_to(slot + 40), check=0)
    assert again.stderr.strip() == f"loopctl: slot {stamp} already ran: run {record['run_id']}"
    back = offset_to(slot - 1800)
    cli("tick", env=back, check=0)
    earlier = cli("run", "hourly", "--scheduled", env=back, check=0)
    assert earlier.stderr.strip() == ("loopctl: not firing hourly: no slot of its schedule "
                                      "has come yet")
    cli("tick", env=offset_to(slot + 50), check=0)
    assert len(cli.records("hourly")) == 1


def test_a_bad_slot_is_refused_with_exit_2_and_nothing_runs(cli: CLI) -> None:
    slot = start_hourly(cli)
    # Not an instant of the schedule, in the future (the next slot is), or
    # no instant at all; then --slot without --scheduled.
    for bad in (iso(slot + 60), iso(slot), "nan", "-1", "x" * 10_000):
        assert bad is not None
        proc = cli("run", "hourly", "--scheduled", "--slot", bad)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (bad, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert cli("run", "hourly", "--slot", iso(slot - 3600) or "").returncode == 2
    assert cli.records("hourly") == []


def test_a_slot_from_before_the_loop_was_started_is_refused(cli: CLI) -> None:
    """Served, it would run once and stay taken; the loop's own first slot
    still runs after it was refused."""
    slot = start_hourly(cli)
    env = offset_to(slot + 30)
    for before in (slot - 3600, slot - 86400 * 365, 0):
        stamp = iso(before) or ""
        proc = cli("run", "hourly", "--scheduled", "--slot", stamp, env=env, check=2)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, (stamp, proc.stderr)
        assert "before loop 'hourly' was started" in lines[0], lines
    assert cli.records("hourly") == []
    first = cli("run", "hourly", "--scheduled", "--slot", iso(slot) or "", env=env, check=0)
    assert first.returncode == 0, first.stderr
    (record,) = cli.records("hourly")
    assert record["due_at"] == iso(slot)
