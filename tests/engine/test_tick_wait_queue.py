"""`tick --wait` with more due loops than `max_concurrent` (issue 51, item 6):
it starts each queued loop as a slot frees and waits for it too, or, when it
cannot (the slots are held by runs it did not start), says so in its exit
code (75) and its last line. Real `loopctl` processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import CLI, agent_command, wait_for
from tests.engine.test_capacity import gated_command, most_at_once, write_top


def test_tick_wait_runs_every_due_loop_behind_the_cap(cli: CLI, tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    gate = tmp_path / "gate"
    gate.touch()  # open: each run notes its start and end, then ends
    for name in ("a", "b", "c"):
        cli("start", "p", "--name", name, "--every", "1h", "--command",
            gated_command(gate, starts), check=0)
    write_top(cli, "max_concurrent: 1\n")
    proc = cli("tick", "--wait")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    ended = [line.split()[3].rstrip(":") for line in proc.stdout.splitlines()
             if line.startswith("run ")]
    assert sorted(ended) == ["a", "b", "c"], proc.stdout
    assert proc.stdout.splitlines()[-1].startswith("run "), proc.stdout  # the last run's end
    assert all(len(cli.records(n)) == 1 for n in "abc")
    assert most_at_once(starts) == 1
    assert not any(st["run"] or st["queued_at"] for st in cli.state()["loops"].values())


def test_tick_wait_json_lists_every_run_it_waited_for(cli: CLI) -> None:
    for name in ("a", "b", "c"):
        cli("start", "p", "--name", name, "--every", "1h", "--command",
            agent_command("--exit", "3" if name == "c" else "0"), check=0)
    write_top(cli, "max_concurrent: 2\n")
    proc = cli("tick", "--wait", "--json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and report["exit_code"] == 1  # c failed, though queued
    assert sorted(r["loop"] for r in report["runs"]) == ["a", "b", "c"]
    assert sorted(f["loop"] for f in report["fired"]) == ["a", "b", "c"]
    assert report["still_queued"] == []


def test_tick_wait_says_what_it_left_queued(cli: CLI, tmp_path: Path,
                                            request: pytest.FixtureRequest) -> None:
    gate, starts = tmp_path / "gate", tmp_path / "starts"
    request.addfinalizer(gate.touch)
    cli("start", "p", "--name", "busy", "--every", "1h", "--command",
        gated_command(gate, starts), check=0)
    write_top(cli, "max_concurrent: 1\n")
    assert [f["loop"] for f in cli.json("tick")["fired"]] == ["busy"]
    for name in ("a", "b"):
        cli("start", "p", "--name", name, "--every", "1h", "--command", agent_command(),
            check=0)
    proc = cli("tick", "--wait")
    assert proc.returncode == 75, (proc.stdout, proc.stderr)
    last = proc.stderr.splitlines()[-1]
    assert "still queued (max_concurrent): a, b" in last, proc.stderr
    assert "runs this tick did not start" in last
    report = json.loads(cli("tick", "--wait", "--json").stdout)
    assert report["exit_code"] == 75 and report["still_queued"] == ["a", "b"]
    gate.touch()
    wait_for(lambda: not cli.state()["loops"]["busy"]["run"])
    assert cli("tick", "--wait").returncode == 0
    assert all(len(cli.records(n)) == 1 for n in "ab")
