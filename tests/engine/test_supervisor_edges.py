"""What a run's supervisor makes of an agent that misbehaves at the edges
(DESIGN §5, §6, §11, §12), with real `loopctl run` processes: a directory
planted where the decision file goes, an agent preset that reports an error
but exits 0, a decision line that is not JSON, and a `--worktree` loop whose
repository is gone by the time it fires."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import CLI


def shell_loop(cli: CLI, name: str, script: str, *extra: str) -> None:
    cli("start", "the objective", "--name", name, "--every", "1h", *extra,
        "--command", shlex.join(["sh", "-c", script]), check=0)


def test_a_directory_planted_as_the_decision_file_is_noted_not_followed(cli: CLI) -> None:
    shell_loop(cli, "planted", 'mkdir "$LOOPCTL_DECISION_FILE" && echo worked')
    proc = cli("run", "planted")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    [record] = cli.records("planted")
    assert record["outcome"] == "ok" and record["decision"] is None
    assert record["note"] == "decision file unreadable: Is a directory"
    assert cli.json("status", "planted")["status"] == "active"


def test_a_fifo_planted_as_the_decision_file_does_not_hang_the_run(cli: CLI) -> None:
    shell_loop(cli, "fifo", 'mkfifo "$LOOPCTL_DECISION_FILE" && echo worked')
    proc = cli("run", "fifo", timeout=20)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    [record] = cli.records("fifo")
    assert record["outcome"] == "ok" and record["decision"] is None
    assert record["note"] == "decision file unreadable: not a regular file"


def test_a_decision_line_that_is_not_json_is_ignored_with_a_note(cli: CLI) -> None:
    shell_loop(cli, "badline",
               """echo 'all done'; echo 'LOOPCTL-DECISION: {"decision": complete}'""")
    proc = cli("run", "badline")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    [record] = cli.records("badline")
    assert record["decision"] is None
    assert record["note"] == "decision line ignored: not valid JSON"
    st = cli.state()["loops"]["badline"]
    assert st["status"] == "active"  # not completed by a line it could not read
    assert st["note"] == f"run {record['run_id']}: decision line ignored: not valid JSON"


def fake_claude(tmp_path: Path, result: dict[str, object]) -> dict[str, str]:
    """A `claude` first on PATH that prints `result` as its JSON and exits 0."""
    folder = tmp_path / "agent-bin"
    folder.mkdir()
    script = folder / "claude"
    script.write_text(f"#!{sys.executable}\nimport json\nprint(json.dumps({result!r}))\n")
    script.chmod(0o755)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def test_an_agent_reporting_an_error_with_exit_0_fails_the_run(cli: CLI,
                                                               tmp_path: Path) -> None:
    env = fake_claude(tmp_path, {
        "type": "result", "subtype": "error_during_execution", "is_error": True,
        "result": "API Error: 500 Internal server error", "session_id": "s-1",
        "total_cost_usd": 0.002})
    cli("start", "fix the build", "--name", "erring", "--every", "1h", "--agent", "claude",
        "--max-failures", "2", env=env, check=0)
    proc = cli("run", "erring", env=env)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    [record] = cli.records("erring")
    assert (record["outcome"], record["exit_code"]) == ("failed", 0)
    assert record["note"] == "the agent reported an error: API Error: 500 Internal server error"
    st = cli.state()["loops"]["erring"]
    assert (st["failures"], st["status"]) == (1, "active")  # counts toward --max-failures
    cli("run", "erring", env=env, check=1)
    st = cli.state()["loops"]["erring"]
    assert (st["failures"], st["status"], st["reason"]) == (2, "paused", "failure_limit")


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True)


def test_a_worktree_loop_whose_repository_is_gone_fails_the_run_and_says_why(
        cli: CLI, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    (repo / "README.md").write_text("hi\n")
    git(repo, "add", "README.md")
    git(repo, "-c", "user.name=O", "-c", "user.email=o@example.com", "commit", "-q", "-m", "i")
    shell_loop(cli, "gone", "echo should not run > ran.txt", "--cwd", str(repo), "--worktree")
    shutil.rmtree(repo / ".git")
    proc = cli("run", "gone")
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    [record] = cli.records("gone")
    assert record["outcome"] == "failed" and record["exit_code"] == 127
    assert record["note"] == f"worktree: --worktree: {repo} is not in a git repository"
    assert not (repo / "ran.txt").exists()
    assert record["argv"] == []  # the agent was never started
