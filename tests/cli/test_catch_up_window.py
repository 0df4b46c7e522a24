"""`--catch-up-window DURATION` (DESIGN §20, issue 50 item 3): kept in
loops.yaml, changed and cleared by `update`, refused when zero, negative or
beside `--catch-up none`, and obeyed by `run --scheduled`."""

from __future__ import annotations

import math
import time

import pytest
import yaml

from conftest import CLI, agent_command
from loopctl.domain.timestamps import iso


def start(cli: CLI, name: str, *extra: str) -> None:
    cli("start", "p", "--name", name, "--cron", "0 * * * *", "--tz", "UTC",
        "--command", agent_command("--print", "x"), *extra, check=0)


def entry(cli: CLI, name: str) -> dict:
    return yaml.safe_load((cli.home / "loops.yaml").read_text())["loops"][name]


def test_the_window_is_kept_changed_and_cleared(cli: CLI) -> None:
    start(cli, "w", "--catch-up-window", "2h")
    assert entry(cli, "w")["catch_up_window"] == "2h"
    cli("update", "w", "--catch-up-window", "30m", check=0)
    assert entry(cli, "w")["catch_up_window"] == "30m"
    cli("update", "w", "--catch-up-window", "none", check=0)
    assert "catch_up_window" not in entry(cli, "w")


@pytest.mark.parametrize("bad", ["0s", "-1h", "nan", "1", "x" * 5000, "11000d"])
def test_a_bad_window_is_refused_in_one_line(cli: CLI, bad: str) -> None:
    proc = cli("start", "p", "--name", "bad", "--every", "1h", "--catch-up-window", bad,
               "--command", "true")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and not (cli.home / "loops.yaml").exists()


def test_a_window_beside_catch_up_none_is_contradictory(cli: CLI) -> None:
    proc = cli("start", "p", "--name", "both", "--every", "1h", "--catch-up", "none",
               "--catch-up-window", "1h", "--command", "true")
    assert proc.returncode == 2 and "contradictory" in proc.stderr
    start(cli, "w", "--catch-up-window", "2h")
    refused = cli("update", "w", "--catch-up", "none")
    assert refused.returncode == 2 and "contradictory" in refused.stderr
    assert entry(cli, "w")["catch_up_window"] == "2h" and "catch_up" not in entry(cli, "w")


def test_run_scheduled_does_not_serve_a_slot_outside_the_window(cli: CLI) -> None:
    start(cli, "w", "--catch-up-window", "20m")
    slot = math.floor(time.time() / 3600 + 1) * 3600
    late = {"LOOPCTL_CLOCK_OFFSET": repr(slot + 1800 - time.time())}
    proc = cli("run", "w", "--scheduled", env=late, check=0)
    assert proc.stderr.strip() == (f"loopctl: not firing w: slot {iso(slot)} is outside its "
                                   "catch-up window (20m)")
    assert cli.records("w") == []
    # On record as tick and the daemon record it, once (DESIGN §20).
    (skipped,) = cli.json("history", "w", "--skipped", "--json")["skipped_slots"]
    assert (skipped["reason"], skipped["slot"]) == ("outside_window", f"schedule:{iso(slot)}")
    again = cli("run", "w", "--scheduled", env=late, check=0)
    assert again.stderr.strip() == f"loopctl: slot {iso(slot)} was skipped: outside_window"
    assert len(cli.json("history", "w", "--skipped", "--json")["skipped_slots"]) == 1


def test_a_late_scheduler_fire_under_catch_up_none_runs_its_slot_unskipped(cli: CLI) -> None:
    """A scheduler that fires 10 minutes late (GitHub's often do) fires for
    that slot: `run --scheduled` serves it and records no skip for it."""
    start(cli, "n", "--catch-up", "none")
    slot = math.floor(time.time() / 3600 + 1) * 3600
    cli("run", "n", "--scheduled", env={"LOOPCTL_CLOCK_OFFSET": repr(slot + 600 - time.time())},
        check=0)
    (record,) = cli.records("n")
    assert record["slot"] == f"schedule:{iso(slot)}" and record["outcome"] == "ok"
    assert cli.json("history", "n", "--skipped", "--json")["skipped_slots"] == []
    assert cli.json("status", "n")["skipped_slots"] is None


def test_a_window_added_to_a_catch_up_none_loop_is_refused(cli: CLI) -> None:
    start(cli, "n", "--catch-up", "none")
    before = (cli.home / "loops.yaml").read_bytes()
    for window in ("1h", "0s", "-5m"):
        proc = cli("update", "n", "--catch-up-window", window)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "Traceback" not in proc.stderr
    assert (cli.home / "loops.yaml").read_bytes() == before
