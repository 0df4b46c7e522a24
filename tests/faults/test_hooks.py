"""Fault 17: attention hooks that fail. Mostly in tests/engine/test_attention.py: a
hanging hook does not delay the next run
(test_a_hanging_hook_does_not_delay_the_next_run), a hook exiting 1 or not
executable is recorded and changes nothing
(test_a_failing_hook_is_recorded_and_changes_nothing). Added: a hook that
does not exist, failures surfacing in `doctor` and leaving the event and the
run record alone, and a hanging hook's own children."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import CLI, agent_command, wait_for

from .support import gone


def blocked_loop(cli: CLI, hook: Path) -> None:
    cli("start", "p", "--name", "hooked", "--every", "1h", "--on-attention", str(hook),
        "--command", agent_command("--decide", "block", "--summary", "stuck"), check=0)


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_a_hook_that_cannot_run_is_recorded_and_changes_nothing(
        cli: CLI, tmp_path: Path, kind: str) -> None:
    hook = tmp_path / "no-such-hook"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o700)
    blocked_loop(cli, hook)  # `start` checks the hook; it goes away later
    hook.unlink()
    if kind == "directory":
        hook.mkdir()
    cli("run", "hooked", check=0)
    error = wait_for(lambda: cli.json("status", "hooked").get("hook_error"))
    assert str(hook) in error["message"]
    status = cli.json("status", "hooked")
    assert (status["status"], status["reason"]) == ("paused", "blocked")
    (record,) = cli.records("hooked")
    assert record["outcome"] == "ok" and record["decision"]["decision"] == "block"
    events = [json.loads(line) for line in
              (cli.state_dir / "events.jsonl").read_text().splitlines()]
    assert [(e["loop"], e["reason"]) for e in events] == [("hooked", "blocked")]
    # doctor names the broken hook; resuming works as if nothing happened.
    doctor = cli("doctor").stdout
    assert any("hooks" in line and str(hook) in line for line in doctor.splitlines()), doctor
    cli("resume", "hooked", check=0)
    assert cli.json("status", "hooked")["status"] == "active"


@pytest.mark.parametrize("kind", ["exits-1", "directory"])
def test_doctor_reports_a_failed_or_unusable_hook(cli: CLI, tmp_path: Path,
                                                  kind: str) -> None:
    hook = tmp_path / "hook"
    hook.write_text("#!/bin/sh\nexit 1\n")
    hook.chmod(0o700)
    blocked_loop(cli, hook)  # `start` checks the hook; it can be replaced later
    if kind == "directory":
        hook.unlink()
        hook.mkdir()
    cli("run", "hooked", check=0)
    wait_for(lambda: cli.json("status", "hooked").get("hook_error"))
    doctor = cli("doctor")
    if kind == "directory":  # not an executable file: the hook can never run
        assert doctor.returncode == 1, doctor.stdout
        assert "needs attention" in doctor.stdout
    else:  # a hook that failed once is a warning (README: doctor)
        assert doctor.returncode == 0, doctor.stdout
        assert any(line.startswith("WARN hooks") and "exited 1" in line
                   for line in doctor.stdout.splitlines()), doctor.stdout


@pytest.mark.slow
def test_a_hanging_hook_is_stopped_whole_at_its_timeout(cli: CLI, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPCTL_HOOK_TIMEOUT", "1")
    pids = tmp_path / "hook-pids"
    hook = tmp_path / "hang.sh"
    hook.write_text(f"#!/bin/sh\necho $$ >> {pids}\nsleep 60 &\necho $! >> {pids}\nwait\n")
    hook.chmod(0o700)
    blocked_loop(cli, hook)
    cli("run", "hooked", check=0)
    error = wait_for(lambda: cli.json("status", "hooked").get("hook_error"), timeout=30)
    assert "timed out" in error["message"]
    hook_pid, child_pid = (int(p) for p in pids.read_text().split())
    assert gone(hook_pid)
    assert wait_for(lambda: gone(child_pid), timeout=3)
