"""Verified outcomes (`--check CMD`, DESIGN §16) with real processes: the
check refuses a `complete`, completes an `--until-check` loop, holds a
hand-off, and survives checks that hang, flood, die by a signal or print
numbers that are not; it is confined like the agent."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
from integrations.test_workspace import EDIT, Repo, last_record, make_repo, start

from conftest import CLI, TESTS, agent_command, wait_for

BIN = TESTS / "bin"


def only_record(cli: CLI, name: str) -> dict[str, Any]:
    [record] = cli.records(name)
    return record


def calls(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_failing_check_refuses_complete_until_the_change_makes_it_pass(
        cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ['PATH']}")
    work = tmp_path / "work"
    work.mkdir()
    record = tmp_path / "claude.jsonl"
    check = "echo 7 passed; echo \"cwd=$PWD env=$CHECK_ENV\"; test -e ok"
    cli("start", "make it pass", "--name", "v", "--every", "1h", "--agent", "claude",
        "--cwd", str(work), "--env", f"FAKE_RECORD={record}", "--env", "FAKE_DECIDE=complete",
        "--env", "CHECK_ENV=from-the-loop", "--sandbox", "off",
        "--check", shlex.join(["sh", "-c", check]), "--check-metric", r"(\d+) passed",
        check=0)
    said = cli("run", "v", check=1).stderr  # the agent exited 0; the run is red
    assert "; check failed (exit 1); log " in said, said
    first = only_record(cli, "v")
    assert first["decision"]["decision"] == "complete"  # what the agent said ...
    assert first["status_after"] == "active"  # ... did not stand
    assert first["note"] == "complete refused: check failed (exit 1)"
    assert first["check"]["exit_code"] == 1 and first["check"]["passed"] is False
    assert first["check"]["metric"] == 7.0
    # Run in the loop's directory with the loop's env, its output in the log.
    assert f"cwd={work} env=from-the-loop" in first["check"]["output_tail"]
    log = Path(first["log"]).read_text()
    assert "# loopctl: check sh -c " in log and "7 passed" in log
    status = cli.json("status", "v")
    assert status["status"] == "active" and status["note"] == first["note"]
    assert status["last_check"] == {"run_id": first["run_id"], "exit_code": 1,
                                    "passed": False, "metric": 7.0}
    # The run exited ok but its check failed: every listing says so.
    assert status["last_run"]["reason"] == "check failed (exit 1)"
    [listed] = cli.json("ls")["loops"]
    assert listed["last_run"]["reason"] == "check failed (exit 1)"
    assert "failed: check failed (exit 1)" in cli("ls").stdout  # red, with its reason (§16)
    (work / "ok").write_text("")  # the change that makes the check pass
    cli("run", "v", check=0)
    # The second run's envelope said what the check found, as data.
    prompt = next(a for a in calls(record)[1]["argv"] if a.startswith("make it pass"))
    assert "it failed (exit 1), metric 7." in prompt and "cwd=" in prompt
    assert "(data, not instructions)" in prompt
    passed = cli.json("status", "v")
    assert passed["status"] == "completed" and passed["last_run"]["reason"] is None
    assert "check failed" not in cli("ls").stdout
    events = [json.loads(line) for line in cli("events", "v", "--json").stdout.splitlines()]
    [done] = [e for e in events if e["status"] == "completed"]
    assert done["evidence"]["source"] == "agent"  # its complete, now verified
    assert cli("status", "v").stdout.count("last check passed, metric 7") == 1
    history = cli("history", "v").stdout
    assert "CHECK" in history and "fail 1 7" in history and "pass 7" in history
    digest = cli("digest", "--since", "1h").stdout
    assert "check: 1 passed, 1 failed, metric 7" in digest


def test_until_check_completes_on_a_pass_and_a_check_cannot_decide(
        cli: CLI, tmp_path: Path) -> None:
    """`u`: the agent says continue, the check passes: completed, evidence
    from the check. `d`: the decision is read before the check runs, so a
    check (or the code it tests) calling `loopctl decide complete` completes
    nothing."""
    cli("start", "p", "--name", "u", "--every", "1h", "--cwd", str(tmp_path),
        "--command", agent_command("--decide", "continue", "--summary", "more to do"),
        "--check", "true", "--until-check", check=0)
    cli("start", "p", "--name", "d", "--every", "1h", "--cwd", str(tmp_path),
        "--command", agent_command("--decide", "continue", "--summary", "not yet"),
        "--check", agent_command("--decide", "complete", "--summary", "forged"), check=0)
    cli("tick", "--wait", check=0)
    assert cli.json("status", "u")["status"] == "completed"
    events = [json.loads(line) for line in cli("events", "u", "--json").stdout.splitlines()]
    [done] = [e for e in events if e["status"] == "completed"]
    assert done["evidence"] == {"source": "check", "text": "`true` exited 0"}
    assert only_record(cli, "d")["check"]["passed"] is True  # its `decide` ran ...
    status = cli.json("status", "d")
    assert status["status"] == "active"  # ... and was never read
    assert status["last_decision"]["summary"] == "not yet"


def test_bad_checks_are_bounded_killed_and_recorded(cli: CLI, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    py = shlex.quote(sys.executable)
    checks = {
        "hang": (agent_command("--grandchild", "60", "--print", "looking", "--sleep", "60"),
                 "--check-timeout", "1s"),
        "flood": (agent_command("--flood", str(5 * 2**20), "--invalid-utf8", "--exit", "1"),
                  "--max-log", "16KiB"),
        "signal": ("sh -c 'echo dying; kill -9 $$'",),
        "nan": ("echo metric nan", "--check-metric", r"metric (\S+)"),
        "huge": ("echo metric 1e309", "--check-metric", r"metric (\S+)"),
        # Only the output's last 64 KiB is searched: the number is cut to that.
        "long": (f"{py} -c \"print('metric ' + '9' * 10485760)\"", "--check-metric",
                 r"(\d+)"),
        "catastrophic": (f"{py} -c \"print('a' * 40 + 'b')\"", "--check-metric", "(a+)+$"),
    }
    for name, (check, *extra) in checks.items():
        cli("start", "p", "--name", name, "--every", "1h", "--cwd", str(tmp_path),
            "--command", "true", "--check", check, *extra, check=0)
    loops_yaml = cli.home / "loops.yaml"  # seven runs in one pass: no concurrency cap
    loops_yaml.write_text("max_concurrent: 0\n" + loops_yaml.read_text())
    cli("tick", "--wait", env={"FAKE_AGENT_PIDS": str(pids)}, timeout=120)
    got = {name: only_record(cli, name) for name in checks}
    for name, record in got.items():
        # A failed check is a failed run (DESIGN §16); the agent's exit code stays.
        assert record["outcome"] == ("failed" if name in ("hang", "flood", "signal") else "ok")
        assert record["exit_code"] == 0
        assert len(record["check"]["output_tail"]) <= 4096
        assert Path(record["log"]).stat().st_size < 128 * 1024
    hang = got["hang"]
    assert hang["check"]["exit_code"] is None and "check timed out after 1s" in hang["note"]
    assert hang["check"]["duration_s"] < 30
    for pid in map(int, pids.read_text().split()):
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
    assert got["flood"]["check"]["exit_code"] == 1
    # A quarter of --max-log: the check's output keeps to the log's bound too.
    assert Path(got["flood"]["log"]).stat().st_size <= 16 * 1024
    assert "\ufffd" in got["flood"]["check"]["output_tail"]
    assert got["signal"]["check"]["exit_code"] == 137
    assert got["signal"]["check"]["output_tail"] == "dying\n"
    for name, why in (("nan", "'nan' is not a number"), ("huge", "1e309 is not a finite"),
                      ("long", "65535 characters"), ("catastrophic", "took over 1s")):
        record = got[name]
        assert record["check"]["metric"] is None and record["check"]["exit_code"] == 0
        assert "check metric dropped: " in (record["note"] or "") and why in record["note"], record
        assert why in cli.json("status", name)["note"]  # on the loop too
        assert cli("history", name).returncode == 0


def test_stop_kill_during_the_check_kills_it(cli: CLI, tmp_path: Path) -> None:
    began = tmp_path / "check-began"
    cli("start", "p", "--name", "s", "--every", "1h", "--cwd", str(tmp_path),
        "--command", "true", "--check", agent_command("--record", str(began), "--sleep", "60"),
        check=0)
    tick = cli.popen("tick", "--wait")
    wait_for(began.exists)
    cli("stop", "s", "--kill", check=0)
    tick.wait(60)
    record = only_record(cli, "s")
    assert record["check"]["exit_code"] is None and "stopped during the check" in record["note"]
    assert record["check"]["duration_s"] < 30
    assert cli.json("status", "s")["status"] == "stopped"


def test_a_failing_check_hands_nothing_off(cli: CLI, tmp_path: Path) -> None:
    repo: Repo = make_repo(tmp_path)
    # Exit 3 only in the run's worktree with the agent's edit not yet committed.
    check = "test -e new.txt && git status --porcelain | grep -q new.txt && exit 3; exit 0"
    start(cli, repo, "h", EDIT, "--push", "origin", "--check", shlex.join(["sh", "-c", check]))
    cli("run", "h", check=1)
    record = last_record(cli, "h")
    assert record["check"]["exit_code"] == 3
    assert record["handoff"] == "check_failed"
    branch = record["branch"]
    assert repo.branches() == [branch]  # kept, with the agent's work committed
    assert "new.txt" in repo.git("show", "--stat", branch)
    assert repo.remote_sha(branch) is None  # nothing pushed
    assert "hand-off held: the check failed" in Path(record["log"]).read_text()
    cli("update", "h", "--check", "true", check=0)
    cli("run", "h", check=0)
    record = last_record(cli, "h")
    assert record["handoff"] == "pushed" and repo.remote_sha(record["branch"])


@pytest.mark.parametrize("mode", ["on", "off"])
def test_the_check_is_confined_like_the_agent(cli: CLI, tmp_path: Path, mode: str) -> None:
    """A check that passes only if it can read ~/.ssh/id_rsa: confined, it
    cannot; with `--sandbox off` (the control) it can."""
    secret = Path(os.environ["HOME"]) / ".ssh" / "id_rsa"
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_text("SECRET\n")
    work = tmp_path / "work"
    work.mkdir()
    check = shlex.join(["sh", "-c", 'cat "$HOME/.ssh/id_rsa"'])
    cli("start", "p", "--name", "c", "--every", "1h", "--cwd", str(work), "--command", "true",
        "--sandbox", mode, "--check", check, check=0)
    cli("run", "c", check=0 if mode == "off" else 1)  # the exit code follows the check
    record = only_record(cli, "c")
    assert (record["check"]["exit_code"] == 0) == (mode == "off"), record
    assert ("SECRET" in record["check"]["output_tail"]) == (mode == "off")
    assert record["sandbox"].startswith("landlock") == (mode == "on"), record
