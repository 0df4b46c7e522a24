"""Smaller trust-boundary cases end to end: a home whose path holds `%`, a
`logs -f` on a run whose foreground supervisor was SIGKILLed, and a daemon
that keeps firing the good loops when one loop's state entry is damaged."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import CLI, TESTS, agent_command, wait_for

# The CLI's behaviour as a process is the subject: `start` too runs as one.
pytestmark = pytest.mark.real_processes


@pytest.fixture
def percent_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CLI:
    home = tmp_path / "100%-home"
    monkeypatch.setenv("LOOPCTL_HOME", str(home))
    return CLI(home)


def test_cron_install_in_a_home_with_percent_stays_one_line(percent_home: CLI, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    table = tmp_path / "crontab.txt"
    monkeypatch.setenv("LOOPCTL_CRONTAB", str(TESTS / "cronbin" / "crontab"))
    monkeypatch.setenv("FAKE_CRONTAB_FILE", str(table))
    cli = percent_home
    assert cli.json("cron", "install")["changed"] is True
    assert cli.json("cron", "install")["changed"] is False  # the marker is found again
    mine = [line for line in table.read_text().splitlines() if "loopctl tick for" in line]
    assert len(mine) == 1
    assert "100\\%-home" in mine[0] and "100%-home" not in mine[0].replace("\\%", "")
    assert cli.json("cron", "status")["installed"] is True
    cli("cron", "uninstall", check=0)
    assert "loopctl tick for" not in table.read_text()


def test_logs_follow_ends_when_the_runs_supervisor_is_killed(cli: CLI, tmp_path: Path) -> None:
    gate = tmp_path / "never"
    # A word found only in the agent's output: the log's own lines say
    # "started" and quote the argv, which once let this test pass unread.
    cli("start", "p", "--name", "fg", "--every", "1h", "--command",
        agent_command("--print", "hello-from-the-agent", "--wait-for", str(gate)), check=0)
    runner = cli.popen("run", "fg", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        run = wait_for(lambda: (cli.state()["loops"]["fg"].get("run") or {}).get("agent")
                       and cli.state()["loops"]["fg"]["run"])
        log = cli.state_dir / "runs" / "fg" / f"{run['run_id']}.log"
        wait_for(lambda: b"hello-from-the-agent" in log.read_bytes())
        follower = cli.popen("logs", "fg", "-f", stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        os.kill(runner.pid, signal.SIGKILL)  # the foreground supervisor dies
        out, err = follower.communicate(timeout=30)  # must end by itself
        seen = (follower.returncode, out, err, sorted(p.name for p in log.parent.iterdir()))
        assert follower.returncode == 1, seen
        header, _, out = out.partition("\n")  # `logs` says which run first (issue 51)
        assert header.startswith("# loopctl: run ") and " of fg " in header, seen
        assert out == "hello-from-the-agent\n", seen  # no footer: nobody was left to write it
        assert "no longer running" in err, seen
        assert "Traceback" not in err
    finally:
        runner.kill()
        runner.wait()
        gate.touch()
        agent = run["agent"]["pid"] if isinstance(run, dict) else None
        if agent:
            try:
                os.kill(agent, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_history_shows_a_dash_for_a_lost_runs_exit_code(cli: CLI) -> None:
    cli("start", "p", "--name", "h", "--every", "1h", "--command",
        agent_command("--print", "x"), check=0)
    cli("run", "h", check=0)
    (record,) = (cli.state_dir / "runs" / "h").glob("*.json")
    data = json.loads(record.read_text())
    data.update(outcome="lost", exit_code=None)
    record.write_text(json.dumps(data))
    rows = cli("history", "h", check=0).stdout.splitlines()
    assert "None" not in rows[1] and " lost " in rows[1] and " - " in rows[1]


def test_the_daemon_keeps_firing_good_loops_beside_a_damaged_entry(cli: CLI,
                                                                   tmp_path: Path) -> None:
    cli("start", "p", "--name", "bad", "--every", "1h", "--after", "1h", "--command",
        agent_command("--print", "bad"), check=0)
    cli("start", "p", "--name", "good", "--every", "1h", "--command",
        agent_command("--print", "good"), check=0)
    # Damaged after the last write, so the daemon is the first to read it.
    state_file = cli.state_dir / "state.json"
    state = json.loads(state_file.read_text())
    state["loops"]["bad"]["next_due"] = "NAN_HERE"
    state_file.write_text(json.dumps(state).replace('"NAN_HERE"', "NaN"))
    daemon = cli.popen("daemon", stderr=subprocess.PIPE)
    try:
        wait_for(lambda: cli.records("good"), timeout=30)
        wait_for(lambda: cli.state()["loops"]["bad"]["reason"] == "error")
    finally:
        daemon.send_signal(signal.SIGTERM)
        _, err = daemon.communicate(timeout=30)
    assert daemon.returncode == 0, err
    assert "Traceback" not in err
    assert cli.records("bad") == []
    assert "NaN" not in state_file.read_text()
    events = [json.loads(line) for line in
              (cli.state_dir / "events.jsonl").read_text().splitlines()]
    assert any(e["loop"] == "bad" and e["reason"] == "error" for e in events)
    doctor = cli("doctor")
    assert doctor.returncode == 1 and "'bad'" in doctor.stdout


def test_a_damaged_workspace_in_state_deletes_nothing_outside(cli: CLI, tmp_path: Path) -> None:
    """A lost run's worktree is cleaned from the loop's own folder, never from
    a path (or branch) that a damaged state.json names."""
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("mine")
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=u", "-c", "user.email=u@x",
                    "commit", "-q", "--allow-empty", "-m", "init"], check=True)
    subprocess.run(["git", "-C", str(repo), "branch", "users-own"], check=True)
    cli("start", "p", "--name", "wt", "--every", "1h", "--worktree", "--cwd", str(repo),
        "--command", agent_command("--print", "x"), check=0)
    state_file = cli.state_dir / "state.json"
    state = json.loads(state_file.read_text())
    entry = state["loops"]["wt"]
    entry["run"] = {"run_id": "20261130T031500Z-0001", "iteration": 1, "due_at": 1.0,
                    "missed": 0, "trigger": "schedule", "spec": {}, "hook": None,
                    "supervisor": {"pid": 999999, "ct": 1.0}, "agent": None,
                    "workspace": {"repo": str(repo), "path": str(precious),
                                  "branch": "users-own", "base_sha": "0" * 40}}
    entry["iterations"] = 1
    state_file.write_text(json.dumps(state))
    report = cli.json("tick")
    assert report["lost"] == ["20261130T031500Z-0001"]
    assert (precious / "keep.txt").read_text() == "mine"
    branches = subprocess.run(["git", "-C", str(repo), "branch", "--list", "users-own"],
                              capture_output=True, text=True, check=True).stdout
    assert "users-own" in branches
    (record,) = [r for r in cli.records("wt") if r["outcome"] == "lost"]
    assert "not usable" in record["note"]


def test_copy_never_writes_through_a_committed_symlink(cli: CLI, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    repo = tmp_path / "repo"
    git = ["git", "-C", str(repo), "-c", "user.name=u", "-c", "user.email=u@x"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "conf").symlink_to(outside)  # the base commits `conf -> outside`
    subprocess.run([*git, "add", "conf"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "link"], check=True)
    (repo / "conf").unlink()  # the checkout has a real folder there now
    (repo / "conf").mkdir()
    (repo / "conf" / ".env").write_text("SECRET=1\n")
    cli("start", "p", "--name", "cp", "--every", "1h", "--worktree", "--cwd", str(repo),
        "--copy", "conf/.env", "--command", agent_command("--print", "x"), check=0)
    cli("run", "cp", check=0)
    assert list(outside.iterdir()) == []


def test_the_digest_prints_no_escape_sequences_from_an_agent(cli: CLI) -> None:
    summary = "done \x1b[2J\x1b]0;pwned\x07 really"
    cli("start", "p", "--name", "esc", "--every", "1h", "--command",
        agent_command("--decide", "complete", "--summary", summary), check=0)
    cli("run", "esc", check=0)
    text = cli("digest", check=0).stdout
    assert "\x1b" not in text and "\x07" not in text
    assert "done" in text and "really" in text
