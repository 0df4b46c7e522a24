"""`loopctl run NAME --scheduled` (what every export runs) and the manual
`run` refusing loops that are not active (DESIGN §9)."""

from __future__ import annotations

import json

import pytest

from conftest import CLI, agent_command


def start(cli: CLI, name: str, *extra: str) -> None:
    cli("start", "p", "--name", name, "--every", "1h", "--command",
        agent_command("--print", "did it"), *extra, check=0)


def hour(n: int) -> dict[str, str]:
    """The clock `n` hours on: the next interval windows of an hourly loop."""
    return {"LOOPCTL_CLOCK_OFFSET": str(n * 3600)}


def test_scheduled_serves_each_window_once_and_records_trigger_schedule(cli: CLI) -> None:
    """Issue 50: a second fire in the same window is refused, naming the run
    that served it (exit 0); the next window fires."""
    start(cli, "s")
    cli("run", "s", "--scheduled", check=0)
    again = cli("run", "s", "--scheduled", check=0)
    (first,) = cli.records("s")
    slot = first["slot"]
    assert slot.startswith("schedule:") and first["due_at"] == slot.removeprefix("schedule:")
    assert again.stderr.strip() == (f"loopctl: slot {first['due_at']} already ran: "
                                    f"run {first['run_id']}")
    cli("run", "s", "--scheduled", env=hour(1), check=0)
    records = cli.records("s")
    assert [r["trigger"] for r in records] == ["schedule", "schedule"]
    assert [r["outcome"] for r in records] == ["ok", "ok"]
    assert records[1]["slot"] != slot


def test_scheduled_stops_at_the_run_limit_and_exits_zero(cli: CLI) -> None:
    start(cli, "lim", "--max-runs", "2")
    codes = [cli("run", "lim", "--scheduled", env=hour(n)) for n in range(4)]
    assert [p.returncode for p in codes] == [0, 0, 0, 0]
    assert len(cli.records("lim")) == 2
    skipped = codes[3].stderr.strip().splitlines()
    assert skipped == [skipped[0]] and skipped[0].startswith("loopctl: not firing lim: ")
    assert "iteration_limit" in skipped[0] and "Traceback" not in codes[3].stderr
    assert cli.json("status", "lim")["reason"] == "iteration_limit"


@pytest.mark.parametrize("verb", ["pause", "stop"])
def test_a_paused_or_stopped_loop_is_not_fired_by_a_scheduler(cli: CLI, verb: str) -> None:
    start(cli, "held")
    cli(verb, "held", check=0)
    proc = cli("run", "held", "--scheduled")
    assert proc.returncode == 0 and "not firing held" in proc.stderr
    assert cli.records("held") == []


def test_manual_run_refuses_a_paused_loop_with_the_fix_unless_forced(cli: CLI) -> None:
    start(cli, "man")
    cli("pause", "man", check=0)
    refused = cli("run", "man")
    assert refused.returncode == 2
    assert "paused (user)" in refused.stderr and "loopctl resume man" in refused.stderr
    assert "--force" in refused.stderr
    assert cli.records("man") == []
    cli("run", "man", "--force", check=0)
    assert [r["trigger"] for r in cli.records("man")] == ["manual"]
    assert cli.json("status", "man")["status"] == "paused"


def test_scheduled_and_force_together_are_bad_usage(cli: CLI) -> None:
    start(cli, "both")
    assert cli("run", "both", "--scheduled", "--force").returncode == 2


def test_scheduled_on_a_failure_limit_stops_firing(cli: CLI) -> None:
    cli("start", "p", "--name", "bad", "--every", "1h", "--max-failures", "2", "--command",
        agent_command("--exit", "1"), check=0)
    codes = [cli("run", "bad", "--scheduled", env=hour(n)).returncode for n in range(4)]
    assert codes == [1, 1, 0, 0]
    assert len(cli.records("bad")) == 2


def test_env_name_without_value_comes_from_the_driver_at_fire_time(cli: CLI) -> None:
    record = cli.home.parent / "record.jsonl"
    cli("start", "p", "--name", "envy", "--every", "1h", "--env", "FAKE_FROM_DRIVER",
        "--env", "FAKE_FIXED=fixed", "--command", agent_command("--record", str(record)),
        check=0)
    assert cli.json("show", "envy", "--reveal")["definition"]["env"] == {"FAKE_FROM_DRIVER": None,
                                                             "FAKE_FIXED": "fixed"}
    assert "from-the-driver" not in (cli.home / "loops.yaml").read_text()
    cli("run", "envy", env={"FAKE_FROM_DRIVER": "from-the-driver"}, check=0)
    seen = json.loads(record.read_text().splitlines()[0])["env"]
    assert seen["FAKE_FROM_DRIVER"] == "from-the-driver"
    assert seen["FAKE_FIXED"] == "fixed"


@pytest.mark.parametrize("schedule", [["--cron", "0 * * * *"], ["--every", "1h"]])
def test_scheduled_records_the_slot_it_served_as_due_at_never_a_future_time(
        cli: CLI, schedule: list[str]) -> None:
    """Issue 49 item 5: an hourly loop fired by CI records as `due_at` the
    instant of the slot it served, at or before its start (it recorded the
    loop's next due time, an hour ahead: lateness -1 h)."""
    from loopctl.domain.timestamps import parse_iso

    cli("start", "p", "--name", "ci", *schedule, "--command",
        agent_command("--print", "did it"), check=0)
    for offset in (0, 5400, 9000):  # now, 1.5 h on, 2.5 h on
        cli("run", "ci", "--scheduled", env={"LOOPCTL_CLOCK_OFFSET": str(offset)}, check=0)
    records = cli.records("ci")
    assert len(records) == 3, records
    for record in records:
        due, started = parse_iso(record["due_at"]), parse_iso(record["started_at"])
        assert record["slot"] == f"schedule:{record['due_at']}", record
        assert due <= started < due + 3600, record  # late by less than one period, never early
    if schedule[0] == "--cron":
        assert all(parse_iso(r["due_at"]) % 3600 == 0 for r in records), records
