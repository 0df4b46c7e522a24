"""The API (DESIGN §19): the CLI's `--json` shapes, read through the same
commands; actions with the CLI's semantics and messages; exit codes as
HTTP statuses (no such loop 404, not active 409, bad input 422)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import CLI, agent_command, wait_for
from serve.support import serving

VOLATILE = ("deadline_remaining_s",)


def steady(loops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in loop.items() if k not in VOLATILE} for loop in loops]


@pytest.mark.slow
def test_reads_are_the_cli_json_views(cli: CLI, tmp_path: Path) -> None:
    cli("start", "p", "--name", "demo", "--every", "1h", "--command",
        agent_command("--print", "did it", "--exit", "1"), check=0)
    cli("run", "demo")
    cli("start", "q", "--name", "other", "--on-demand", "--command", agent_command(), check=0)
    with serving(tmp_path) as served:
        status, listed = served.json("GET", "/api/loops")
        assert status == 200
        assert steady(listed["loops"]) == steady(cli.json("ls")["loops"])
        assert listed["loops"][0]["last_run"]["reason"] == "did it"
        status, one = served.json("GET", "/api/loops/demo")
        assert status == 200 and steady([one]) == steady([cli.json("status", "demo")])
        status, runs = served.json("GET", "/api/loops/demo/runs")
        assert status == 200 and runs == cli.json("history", "demo")
        assert served.json("GET", "/api/loops/demo/runs?limit=0")[1]["runs"] == runs["runs"]
        assert served.json("GET", "/api/loops/demo/runs?limit=-1")[0] == 422
        assert served.json("GET", "/api/loops/demo/runs?limit=%C2%B2")[0] == 422  # "²"
        for path in ("/api/loops/nope", "/api/loops/nope/runs", "/api/loops/..%2Fx"):
            status, said = served.json("GET", path)
            assert status == 404 and "no such loop" in said["error"], path


def test_actions_say_what_the_cli_says_with_its_codes_as_statuses(cli: CLI,
                                                                   tmp_path: Path) -> None:
    cli("start", "p", "--name", "demo", "--every", "1h", "--after", "1h",
        "--command", agent_command(), check=0)
    with serving(tmp_path) as served:
        status, said = served.json("POST", "/api/loops/demo/pause")
        assert (status, said["message"], said["status"]) == (200, "paused", "paused")
        status, said = served.json("POST", "/api/loops/demo/run")
        cli_said = cli("run", "demo").stderr.strip()
        # The CLI's refusal, with the API's way out instead of `--force` (issue 51 item 14).
        shared = said["error"].partition("; from the API")[0]
        assert status == 409 and shared in cli_said and "--force" in cli_said, (said, cli_said)
        assert "--force" not in said["error"] and "POST /api/loops/demo/resume" in said["error"]
        status, said = served.json("POST", "/api/loops/demo/trigger", b"payload")
        assert status == 409 and said["error"] == cli("trigger", "demo").stderr.strip() \
            .removeprefix("loopctl: error: ")
        assert served.json("POST", "/api/loops/demo/resume")[1]["status"] == "active"
        assert served.json("POST", "/api/loops/demo/stop")[1]["message"] == "stopped"
        status, said = served.json("POST", "/api/loops/demo/pause")
        assert status == 409 and "only active loops can be paused" in said["error"]
        assert served.json("POST", "/api/loops/nope/pause")[0] == 404
        assert served.json("POST", "/api/loops/demo/explode")[0] == 404
    assert cli.state()["loops"]["demo"]["status"] == "stopped"


def test_trigger_takes_the_body_as_its_payload_and_refuses_bad_ones(cli: CLI,
                                                                     tmp_path: Path) -> None:
    cli("start", "p", "--name", "od", "--on-demand", "--command", agent_command(), check=0)
    pending = cli.state_dir / "runs" / "od" / "trigger.pending"
    with serving(tmp_path) as served:
        for bad in (b"x" * (64 * 1024 + 1), b"\xff\xfe not utf-8"):
            status, said = served.json("POST", "/api/loops/od/trigger", bad)
            assert status == 422 and "payload" in said["error"], said
        assert cli.state()["loops"]["od"]["triggered"] is None and not pending.exists(), \
            "a refused payload fires nothing and writes nothing"
        status, said = served.json("POST", "/api/loops/od/trigger", b"fix <this>")
        assert status == 202 and said["accepted"] and said["triggers"] == 1
        assert said["driver"] == "none", "trigger --json's own field and value"
        assert "no driver is running" in said["driver_note"], \
            "with no driver, the answer says the fire waits"
        assert pending.read_text() == "fix <this>"
        status, said = served.json("POST", "/hooks/trigger/od", b"second")
        assert status == 202 and said["triggers"] == 2
        assert served.json("POST", "/hooks/trigger/nope", b"x")[0] == 404
    assert pending.read_text() == "second", "the last payload wins"
    cli("tick", check=0)
    record = wait_for(lambda: cli.records("od"))[0]
    assert (record["trigger"], record["triggers"]) == ("api", 2)


def test_run_now_starts_a_supervised_run_without_waiting(cli: CLI, tmp_path: Path) -> None:
    marker = tmp_path / "go"
    cli("start", "p", "--name", "demo", "--every", "1h", "--after", "1h",
        "--command", agent_command("--wait-for", str(marker), "--print", "ran"), check=0)
    with serving(tmp_path) as served:
        status, said = served.json("POST", "/api/loops/demo/run")
        assert status == 202 and said["message"] == f"started run {said['run_id']}"
        running = cli.state()["loops"]["demo"]["run"]
        assert running["run_id"] == said["run_id"]
        assert running["supervisor"]["pid"] != served.proc.pid, "a supervisor of its own"
        status, again = served.json("POST", "/api/loops/demo/run")
        assert status == 409 and "has a run in flight" in again["error"]
        marker.touch()
        record = wait_for(lambda: cli.records("demo"), timeout=30)[0]
        wait_for(lambda: cli.state()["loops"]["demo"]["run"] is None)
        cli("pause", "demo", check=0)
        status, refused = served.json("POST", "/api/loops/demo/run")
        # The API has no --force: its way out is its own (issue 51 item 14).
        assert status == 409 and "--force" not in refused["error"], refused
        assert "POST /api/loops/demo/resume" in refused["error"], refused
    assert (record["run_id"], record["outcome"], record["trigger"]) == \
        (said["run_id"], "ok", "manual")
    assert "ran" in Path(record["log"]).read_text()
    assert json.loads(json.dumps(cli.state()["loops"]["demo"]))["run"] is None
