"""Agents deciding: decide, auto pace, --until, --continue-session (issue 4)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CLI, TESTS, agent_command, wait_for
from loopctl.domain.timestamps import parse_iso

FAKE_BIN = str(TESTS / "bin")


@pytest.fixture(autouse=True)
def fake_claude_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", FAKE_BIN + os.pathsep + os.environ["PATH"])


def claude_loop(cli: CLI, name: str, *extra: str, env: dict[str, str] | None = None,
                prompt: str = "keep the build green") -> None:
    env_args = [a for k, v in (env or {}).items() for a in ("--env", f"{k}={v}")]
    cli("start", "--name", name, "--agent", "claude", *extra, *env_args, "--", prompt, check=0)


def test_decide_complete_through_the_path_shim_ends_the_loop(cli: CLI) -> None:
    claude_loop(cli, "done", "--every", "1h", env={"FAKE_DECIDE": "complete"})
    cli("run", "done", check=0)
    status = cli.json("status", "done")
    assert status["status"] == "completed"
    assert status["last_decision"]["summary"] == "fake complete"
    assert "fake complete" in cli("status", "done", check=0).stdout
    history = cli.json("history", "done")["runs"]
    assert history[0]["decision"]["decision"] == "complete"
    assert "complete" in cli("history", "done", check=0).stdout
    assert cli.json("tick")["fired"] == []


def test_decide_block_pauses_and_resume_works(cli: CLI) -> None:
    cli("start", "p", "--name", "blocked", "--every", "1h", "--command",
        agent_command("--decide", "block", "--summary", "need a key"), check=0)
    cli("run", "blocked", check=0)
    status = cli.json("status", "blocked")
    assert (status["status"], status["reason"]) == ("paused", "blocked")
    assert status["last_decision"]["summary"] == "need a key"
    cli("resume", "blocked", check=0)
    assert cli.json("status", "blocked")["status"] == "active"


def test_decide_fail_ends_the_loop_failed(cli: CLI) -> None:
    cli("start", "p", "--name", "doomed", "--every", "1h", "--command",
        agent_command("--decide", "fail"), check=0)
    cli("run", "doomed", check=0)
    assert cli.json("status", "doomed")["status"] == "failed"
    assert cli("resume", "doomed").returncode == 2


def test_decide_outside_a_run_exits_2() -> None:
    proc = subprocess.run([sys.executable, "-m", "loopctl", "decide", "complete"],
                          capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items()
                               if k != "LOOPCTL_DECISION_FILE"})
    assert proc.returncode == 2
    assert "only works inside a run" in proc.stderr


@pytest.mark.slow
def test_auto_pace_runs_again_after_the_requested_delay(cli: CLI) -> None:
    claude_loop(cli, "paced", "--every", "auto", "--min-delay", "1s",
                env={"FAKE_DECIDE": "continue", "FAKE_NEXT": "5s"})
    daemon = cli.popen("daemon", "--quiet")
    try:
        records = wait_for(lambda: len(cli.records("paced")) >= 2 and cli.records("paced"),
                           timeout=30)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=10)
    first, second = records[0], records[1]
    assert first["next_delay_s"] == 5
    # The second run came due 5 s after the first ended (record times are
    # whole seconds) and did not start before that; how much later the
    # daemon got to it depends on the machine, not on the pacing.
    assert 4 <= parse_iso(second["due_at"]) - parse_iso(first["ended_at"]) <= 6
    assert parse_iso(second["started_at"]) >= parse_iso(second["due_at"])


def test_auto_pace_clamps_a_long_delay_and_records_it(cli: CLI) -> None:
    claude_loop(cli, "clamped", "--every", "auto", "--max-delay", "1h",
                env={"FAKE_DECIDE": "continue", "FAKE_NEXT": "10h"})
    cli("run", "clamped", check=0)
    record = cli.records("clamped")[0]
    assert record["next_delay_s"] == 3600
    assert "clamped" in record["note"]
    state = cli.state()["loops"]["clamped"]
    assert state["next_due"] == pytest.approx(parse_iso(record["ended_at"]) + 3600, abs=2)


def test_auto_pace_without_decisions_exhausts_the_keepalive(cli: CLI) -> None:
    claude_loop(cli, "silent", "--every", "auto")
    cli("run", "silent", check=0)
    assert cli.json("status", "silent")["status"] == "active"
    cli("run", "silent", check=0)
    status = cli.json("status", "silent")
    assert (status["status"], status["reason"]) == ("paused", "keepalive_exhausted")


def test_until_matches_the_final_result_not_the_prompt(cli: CLI) -> None:
    claude_loop(cli, "echoes", "--every", "1h", "--until", "DONE",
                prompt="say DONE when finished", env={"FAKE_RESULT": "still working"})
    cli("run", "echoes", check=0)
    assert cli.json("status", "echoes")["status"] == "active"
    claude_loop(cli, "finishes", "--every", "1h", "--until", "DONE",
                env={"FAKE_RESULT": "all tests pass: DONE"})
    cli("run", "finishes", check=0)
    assert cli.json("status", "finishes")["status"] == "completed"


def test_continue_session_resumes_the_previous_session(cli: CLI, tmp_path: Path) -> None:
    record = tmp_path / "argv.jsonl"
    claude_loop(cli, "chat", "--every", "1h", "--continue-session", "--sandbox", "off",
                env={"FAKE_RECORD": str(record)})
    cli("run", "chat", check=0)
    first_session = cli.records("chat")[0]["session_id"]
    assert first_session and first_session.startswith("sess-")
    cli("run", "chat", check=0)
    calls = [json.loads(line)["argv"] for line in record.read_text().splitlines()]
    assert "--resume" not in calls[0]
    assert calls[1][calls[1].index("--resume") + 1] == first_session


def test_preset_prompt_is_wrapped_in_the_envelope(cli: CLI, tmp_path: Path) -> None:
    record = tmp_path / "argv.jsonl"
    claude_loop(cli, "wrapped", "--every", "1h", "--max-runs", "7", "--sandbox", "off",
                env={"FAKE_RECORD": str(record)}, prompt="-fix the flaky test")
    cli("run", "wrapped", check=0)
    argv = json.loads(record.read_text())["argv"]
    prompt = argv[argv.index("--") + 1]
    assert prompt.startswith("-fix the flaky test")
    assert "run 1 of 7" in prompt
    assert "loopctl decide" in prompt
    assert "--allowedTools=Bash(loopctl decide *)" in argv
    assert "--dangerously-skip-permissions" not in argv


def test_missing_agent_binary_fails_the_run_clearly(cli: CLI) -> None:
    proc = cli("start", "p", "--name", "nobin", "--every", "1h", "--agent", "crush")
    assert proc.returncode == 0 and "not on PATH" in proc.stderr
    assert cli("run", "nobin").returncode == 1
    record = cli.records("nobin")[0]
    assert record["outcome"] == "failed" and record["exit_code"] == 127
    assert "agent not found on PATH: crush" in record["note"]


def test_missing_prompt_file_fails_the_run_and_counts(cli: CLI, tmp_path: Path) -> None:
    prompt = tmp_path / "LOOP.md"
    prompt.write_text("do things")
    cli("start", "--prompt-file", str(prompt), "--name", "pf", "--every", "1h",
        "--agent", "claude", check=0)
    prompt.unlink()
    assert cli("run", "pf").returncode == 1
    record = cli.records("pf")[0]
    assert "cannot read prompt file" in record["note"]
    assert cli.json("status", "pf")["failures"]["consecutive"] == 1
