"""Valves, attention events, hooks and doctor with real processes (issue 5)."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import psutil
import pytest
from faults.support import home_processes

from conftest import CLI, TESTS, agent_command, wait_for
from loopctl.domain.timestamps import parse_iso

EVENT_FIELDS = {"version", "status", "loop", "summary", "evidence", "objective", "iteration",
                "max_runs", "elapsed_s", "deadline_remaining_s", "run_id", "log", "cwd",
                "ended_at", "observed_at"}


@pytest.fixture(autouse=True)
def fake_claude_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(TESTS / "bin") + os.pathsep + os.environ["PATH"])


def hook_script(tmp_path: Path, body: str = "") -> tuple[Path, Path]:
    """A real hook: appends the JSON it receives on stdin to a file."""
    out = tmp_path / "hook-events.jsonl"
    hook = tmp_path / "hook.py"
    hook.write_text(
        "#!/usr/bin/env python3\nimport sys, json\n"
        f"event = json.load(sys.stdin)\nopen({str(out)!r}, 'a').write(json.dumps(event) + '\\n')\n"
        + body)
    hook.chmod(0o700)
    return hook, out


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def hook_events(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


@pytest.mark.parametrize("decision,status,reason", [
    ("complete", "completed", None),
    ("fail", "failed", None),
    ("block", "paused", "blocked"),
])
def test_hook_receives_the_event_for_an_agent_decision(
        cli: CLI, tmp_path: Path, decision: str, status: str, reason: str | None) -> None:
    hook, out = hook_script(tmp_path)
    cli("start", "the objective", "--name", "dec", "--every", "1h", "--on-attention", str(hook),
        "--command", agent_command("--decide", decision, "--summary", "S", "--evidence", "E"),
        check=0)
    cli("run", "dec")
    event = wait_for(lambda: hook_events(out))[0]
    assert set(event) >= EVENT_FIELDS
    assert (event["status"], event["reason"], event["loop"]) == (status, reason, "dec")
    assert event["summary"] == "S"
    assert event["evidence"] == {"source": "agent", "text": "E"}
    assert event["objective"] == "the objective"
    assert event["iteration"] == 1 and event["max_runs"] == 50
    assert Path(event["log"]).exists()
    logged = [json.loads(line) for line in
              (cli.state_dir / "events.jsonl").read_text().splitlines()]
    assert [e["status"] for e in logged] == [status]


def test_expiry_event_from_a_driver_pass(cli: CLI, tmp_path: Path) -> None:
    hook, out = hook_script(tmp_path)
    cli("start", "p", "--name", "short", "--every", "1h", "--for", "30s", "--after", "1h",
        "--on-attention", str(hook), "--command", agent_command(), check=0)
    cli("tick", env={"LOOPCTL_CLOCK_OFFSET": "40"}, check=0)
    event = wait_for(lambda: hook_events(out))[0]
    assert event["status"] == "expired"
    assert event["evidence"]["source"] == "loopctl"
    assert parse_iso(event["observed_at"]) - parse_iso(event["ended_at"]) >= 9
    status = cli.json("status", "short")
    assert status["status"] == "expired"
    late = {"LOOPCTL_CLOCK_OFFSET": "40"}
    refused = cli("resume", "short", env=late)
    assert refused.returncode == 2 and "duration_limit" in refused.stderr
    cli("update", "short", "--for", "2h", env=late, check=0)
    cli("resume", "short", env=late, check=0)
    assert cli.json("status", "short")["status"] == "active"


def test_global_hook_from_loops_yaml(cli: CLI, tmp_path: Path) -> None:
    hook, out = hook_script(tmp_path)
    cli("start", "p", "--name", "g", "--every", "1h", "--max-runs", "1",
        "--command", agent_command(), check=0)
    loops = cli.home / "loops.yaml"
    loops.write_text(f"on_attention: {hook}\n" + loops.read_text())
    cli("run", "g", check=0)
    event = wait_for(lambda: hook_events(out))[0]
    assert (event["status"], event["reason"]) == ("paused", "iteration_limit")


@pytest.mark.slow
def test_three_failures_back_off_pause_and_emit_one_event(cli: CLI, tmp_path: Path) -> None:
    hook, out = hook_script(tmp_path)
    cli("start", "p", "--name", "flaky", "--every", "1s", "--on-attention", str(hook),
        "--command", agent_command("--exit", "1"), check=0)
    daemon = cli.popen("daemon", "--quiet")
    try:
        wait_for(lambda: cli.json("status", "flaky")["status"] == "paused", timeout=30)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=10)
    status = cli.json("status", "flaky")
    assert status["reason"] == "failure_limit"
    records = cli.records("flaky")
    assert [r["outcome"] for r in records] == ["failed"] * 3
    gaps = [parse_iso(later["due_at"]) - parse_iso(earlier["ended_at"])
            for earlier, later in zip(records, records[1:], strict=False)]
    assert gaps[0] == pytest.approx(2, abs=1)  # x2 after one failure
    assert gaps[1] == pytest.approx(4, abs=1)  # x4 after two
    logged = [json.loads(line) for line in
              (cli.state_dir / "events.jsonl").read_text().splitlines()]
    # Each event is handed to the hook by a detached process: once no process
    # of this home is left (supervisors, deliveries, the hook), every delivery
    # that will ever come has come; then see that there was only the one.
    wait_for(lambda: not home_processes(cli.home))
    events = hook_events(out)
    assert [(e["status"], e["reason"]) for e in logged] == [("paused", "failure_limit")]
    assert [(e["status"], e["reason"]) for e in events] == [("paused", "failure_limit")]


def test_rate_limit_defers_at_least_a_minute_then_runs_after_the_reset(
        cli: CLI, tmp_path: Path) -> None:
    # The limit "resets" in 3 s: the deferral still lasts a minute (a clock
    # moved on by LOOPCTL_CLOCK_OFFSET stands in for the wait).
    cli("start", "--name", "limited", "--every", "1h", "--agent", "claude",
        "--env", "FAKE_RESET_IN=3", "--env", f"FAKE_LIMIT_ONCE={tmp_path / 'once'}",
        "--sandbox", "off", "--", "p", check=0)  # the marker is outside its cwd
    assert cli("run", "limited").returncode == 75
    resume_at = cli.state()["loops"]["limited"]["resume_at"]
    [first] = cli.records("limited")
    assert resume_at >= parse_iso(first["ended_at"]) + 59, resume_at
    assert "deferred 60s" in first["note"], first["note"]
    assert cli("tick", "--wait", env={"LOOPCTL_CLOCK_OFFSET": "30"}).returncode == 0
    assert len(cli.records("limited")) == 1  # not yet
    assert cli("tick", "--wait", env={"LOOPCTL_CLOCK_OFFSET": "61"}).returncode == 0
    first, second = cli.records("limited")[:2]
    assert first["outcome"] == "deferred"
    assert second["outcome"] == "ok"
    assert parse_iso(second["started_at"]) >= parse_iso(first["ended_at"]) + 60
    status = cli.json("status", "limited")
    assert status["failures"]["consecutive"] == 0
    assert status["runs"]["used"] == 1  # the deferred run did no work


def test_status_shows_rate_limited_until(cli: CLI) -> None:
    cli("start", "--name", "lim", "--every", "1h", "--agent", "claude",
        "--env", "FAKE_RESET_IN=600", "--", "p", check=0)
    cli("run", "lim")
    status = cli.json("status", "lim")
    # The CLI's own usage-limit field: the loop is held by its account.
    assert (status["status"], status["reason"]) == ("held", "rate_limited")
    assert status["rate_limited_until"] is not None
    assert "held (rate_limited) until" in cli("status", "lim", check=0).stdout
    report = cli.json("tick")
    assert report["deferred"][0]["loop"] == "lim"


def test_budget_pauses_before_a_run_over_budget(cli: CLI) -> None:
    cli("start", "--name", "spender", "--every", "1s", "--agent", "claude",
        "--budget-usd", "0.02", "--env", "FAKE_COST=0.01", "--", "p", check=0)
    cli("run", "spender", check=0)
    assert cli.json("status", "spender")["status"] == "active"
    cli("run", "spender", check=0)
    status = cli.json("status", "spender")
    assert (status["status"], status["reason"]) == ("paused", "budget_limit")
    assert status["cost_usd"]["spent"] == pytest.approx(0.02)
    assert cli("resume", "spender").returncode == 2


def test_no_progress_pauses_after_identical_results(cli: CLI) -> None:
    cli("start", "--name", "stuck", "--every", "1h", "--agent", "claude", "--no-progress", "2",
        "--env", "FAKE_RESULT=nothing changed at 12:00:01", "--", "p", check=0)
    cli("run", "stuck", check=0)
    assert cli.json("status", "stuck")["status"] == "active"
    cli("run", "stuck", check=0)
    assert cli.json("status", "stuck")["reason"] == "no_progress"


@pytest.mark.slow
def test_a_hanging_hook_does_not_delay_the_next_run(cli: CLI, tmp_path: Path) -> None:
    pid_file, gate = tmp_path / "hook.pids", tmp_path / "gate"
    # Each hook notes its pid and hangs until the test opens the gate.
    hook, out = hook_script(tmp_path, (
        f"import os, time\nopen({str(pid_file)!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
        f"end = time.time() + 120\n"
        f"while not os.path.exists({str(gate)!r}) and time.time() < end:\n"
        "    time.sleep(0.05)\n"))
    cli("start", "p", "--name", "hang", "--every", "1h", "--max-failures", "1",
        "--on-attention", str(hook), "--command", agent_command("--exit", "1"), check=0)
    try:
        # The first hook may hang as long as the test needs (a 10-minute
        # timeout), so the check below does not depend on the machine's speed.
        cli("run", "hang", env={"LOOPCTL_HOOK_TIMEOUT": "600"})
        wait_for(lambda: hook_events(out) and pid_file.exists() and pid_file.read_text())
        hook_pid = int(pid_file.read_text().split()[0])
        cli("resume", "hang", check=0)
        cli("run", "hang", env={"LOOPCTL_HOOK_TIMEOUT": "1"})
        # The run came back while the first run's hook was still hanging.
        assert running(hook_pid)
        # The second run's hook hangs too, and is stopped at its 1 s timeout.
        status = wait_for(lambda: cli.json("status", "hang").get("hook_error"), timeout=20)
        assert "timed out after 1s" in status["message"]
        assert "hook error" in cli("status", "hang", check=0).stdout
    finally:
        gate.touch()
    wait_for(lambda: not running(hook_pid))


@pytest.mark.parametrize("kind", ["exits-1", "not-executable"])
def test_a_failing_hook_is_recorded_and_changes_nothing(
        cli: CLI, tmp_path: Path, kind: str) -> None:
    hook, _ = hook_script(tmp_path, "sys.exit(1)\n")
    cli("start", "p", "--name", "hk", "--every", "1h", "--on-attention", str(hook),
        "--command", agent_command("--decide", "block"), check=0)
    if kind == "not-executable":  # `start` refuses one; it can lose its x bit later
        hook.chmod(0o600)
    cli("run", "hk", check=0)
    error = wait_for(lambda: cli.json("status", "hk").get("hook_error"))
    assert ("exited 1" if kind == "exits-1" else "not executable") in error["message"]
    assert cli.json("status", "hk")["reason"] == "blocked"


def test_doctor_names_an_overdue_loop_and_the_fix(cli: CLI) -> None:
    cli("start", "p", "--name", "forgotten", "--every", "10m",
        "--command", agent_command(), check=0)
    proc = cli("doctor", env={"LOOPCTL_CLOCK_OFFSET": "600"})
    assert proc.returncode == 1
    assert "forgotten" in proc.stdout and "no driver fired it" in proc.stdout
    # The fix is the drivers finding's: the one that applies on this machine.
    assert re.search(r"^FAIL drivers: .*(`loopctl cron install`|keep `loopctl daemon` running)",
                     proc.stdout, re.M), proc.stdout
    report = json.loads(cli("doctor", "--json", env={"LOOPCTL_CLOCK_OFFSET": "600"}).stdout)
    assert report["healthy"] is False
    assert any(f["check"] == "overdue" for f in report["findings"])


def test_doctor_is_healthy_on_a_fresh_home(cli: CLI) -> None:
    proc = cli("doctor")
    assert proc.returncode == 0, proc.stdout
    assert "healthy" in proc.stdout
