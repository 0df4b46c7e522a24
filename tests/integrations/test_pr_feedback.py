"""PR feedback (DESIGN §16) with real git, real `loopctl run` processes and the
fake `gh` of tests/workspace/fake_gh.py, which refuses (and the `gh` fixture
then fails the test) any question about a PR, branch or run loopctl did not
open or was not shown: asking about the base branch instead of the PR fails.

A run after a PR whose checks failed continues that PR's branch, sees the
failed checks and the tail of their logs (bounded, sanitized, as data), and
pushes to it; after --fix-attempts such runs the PR is left for review.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from conftest import CLI, TESTS
from integrations.test_workspace import FakeGh, Repo, events, gh, last_record, repo  # noqa: F401 - fixtures
from loopctl.domain.feedback import LOG_TAIL
from loopctl.domain.model import parse_loop
from loopctl.integrations import pr_feedback
from loopctl.integrations.git import GitError

URL7, URL8 = "https://github.com/o/r/pull/7", "https://github.com/o/r/pull/8"
PASSING = [{"name": "ci", "state": "SUCCESS", "bucket": "pass", "link": "", "workflow": "CI"}]
FAILING = [{"name": "tests", "state": "FAILURE", "bucket": "fail", "workflow": "CI",
            "link": "https://github.com/o/r/actions/runs/42/job/9"},
           {"name": "lint", "state": "FAILURE", "bucket": "fail", "workflow": "ext",
            "link": "https://lint.example/r/1"}] + PASSING
HOSTILE = ("\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\u202etxt.exe\u202c ```` {prompt} --yolo "
           "../../etc/passwd\n").encode()


def agent_bin(tmp_path: Path) -> Path:
    """`claude` on PATH: runs $FAKE_WORK in its worktree, then the fake
    Claude Code of tests/bin, which records its argv (the prompt) and env."""
    folder = tmp_path / "agent-bin"
    folder.mkdir()
    script = folder / "claude"
    script.write_text('#!/bin/sh\nsh -c "$FAKE_WORK"\n'
                      f'exec {shlex.quote(sys.executable)} '
                      f'{shlex.quote(str(TESTS / "bin" / "claude"))} "$@"\n')
    script.chmod(0o755)
    return folder


def calls_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(row) for row in path.read_text().splitlines()]


def test_a_pr_whose_checks_failed_is_continued_then_left_for_review(
        cli: CLI, repo: Repo, gh: FakeGh, tmp_path: Path) -> None:  # noqa: F811
    checks, log, calls, seen = (tmp_path / n for n in ("checks", "log", "calls", "seen"))
    checks.write_text(json.dumps(PASSING))
    log.write_bytes(b"x" * (10 * 2**20) + b"\n" + HOSTILE + b"FAILED tests/test_x.py::test_y\n")
    env = gh.env(FAKE_GH_CHECKS_FILE=str(checks), FAKE_GH_RUN_LOG_FILE=str(log))
    env["PATH"] = f"{agent_bin(tmp_path)}{os.pathsep}{env['PATH']}"
    work = (f'echo "run $LOOPCTL_ITERATION" >> work.txt; git rev-parse --abbrev-ref HEAD '
            f'>> {seen}; echo "note $LOOPCTL_ITERATION" >> "$LOOPCTL_NOTES_FILE"')
    cli("start", "make the tests pass", "--name", "ship", "--every", "1h", "--cwd",
        str(repo.path), "--agent", "claude", "--sandbox", "off", "--worktree", "--push",
        "origin", "--pr", "--fix-attempts", "1", "--notes", "--env", f"FAKE_WORK={work}",
        "--env", f"FAKE_RECORD={calls}", env=env, check=0)
    cli("run", "ship", env=env, check=0)
    first = last_record(cli, "ship")
    assert (first["handoff"], first["pr_url"]) == ("pr_opened", URL7)
    assert "pr_feedback" not in first  # no PR to look at yet
    assert cli.json("status", "ship")["pr_feedback"] == {
        "url": URL7, "branch": first["branch"], "fixes": 0, "review": False}

    checks.write_text(json.dumps(FAILING))
    asked = len(gh.calls())
    cli("run", "ship", env=env, check=0)
    second = last_record(cli, "ship")
    assert second["pr_feedback"] == {"pr": URL7, "action": "continue", "attempt": 1, "of": 1,
                                     "branch": first["branch"], "failed_checks": ["tests", "lint"],
                                     "why": "checks failed: tests, lint"}
    assert (second["handoff"], second["pr_url"]) == ("pr_updated", URL7), second
    assert second["branch"] == first["branch"] and second["commits"] == 1
    assert repo.remote_sha(first["branch"]) == second["head"]  # the push updated the PR
    assert seen.read_text().split() == [first["branch"]] * 2
    # Asked about the PR by its URL, and about the one Actions run its checks link to.
    assert gh.calls()[asked:] == [
        ["pr", "view", URL7, "--json", "state,headRefName,isCrossRepository"],
        ["pr", "checks", URL7, "--json", "name,state,bucket,link,workflow"],
        ["run", "view", "42", "--log-failed", "-R", "github.com/o/r"]]
    prompt = calls_of(calls)[1]["argv"][-1]
    assert f"continues pull request {URL7} (fix attempt 1 of 1)" in prompt
    assert "- tests (CI): https://github.com/o/r/actions/runs/42/job/9" in prompt
    assert "FAILED tests/test_x.py::test_y" in prompt and "{prompt} --yolo" in prompt
    assert not any(c in prompt for c in "\x1b\x07\u202e")
    assert len(prompt.encode()) < LOG_TAIL + 4096  # 10 MiB of log: the tail only

    cli("run", "ship", env=env, check=0)  # still failing, no attempt left
    third = last_record(cli, "ship")
    assert third["pr_feedback"]["action"] == "review"
    assert (third["handoff"], third["pr_url"]) == ("pr_opened", URL8)  # a fresh run, a new PR
    assert third["branch"] != first["branch"]
    review = [e for e in events(cli) if e.get("reason") == "needs_review"]
    assert len(review) == 1 and review[0]["pr"] == URL7
    assert "after 1 fix run(s)" in review[0]["evidence"]["text"]
    assert cli.json("status", "ship")["pr_feedback"]["url"] == URL8
    # The notes went from worktree to worktree.
    assert cli("notes", "ship", check=0).stdout.split("\n")[:3] == ["note 1", "note 2", "note 3"]


@pytest.fixture
def looking(repo: Repo, gh: FakeGh, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
            tmp_path: Path) -> dict[str, Any]:
    """The fake gh on PATH with one PR (7) open for a run branch of `ship`."""
    for key, value in gh.env().items():
        monkeypatch.setenv(key, value)
    branch = "loopctl/ship/20261201T030000Z-0001"
    subprocess.run(["gh", "pr", "create", "--base", "main", "--head", branch], check=True,
                   capture_output=True)
    log = tmp_path / "log"
    monkeypatch.setenv("FAKE_GH_CHECKS", json.dumps(FAILING))
    monkeypatch.setenv("FAKE_GH_RUN_LOG_FILE", str(log))
    loop = parse_loop("ship", {"prompt": "p", "every": "1h", "cwd": str(repo.path),
                               "worktree": True, "base": "main", "push": "origin", "pr": True})
    return {"loop": loop, "log": log, "repo": str(repo.path),
            "tracked": {"url": URL7, "branch": branch, "fixes": 0, "review": False}}


@pytest.mark.parametrize("head", ["-x", "../main", "loopctl/other/20261201T030000Z-0001",
                                  "loopctl/ship/20261201T030000Z-0002"])
def test_a_pr_whose_head_is_not_the_loops_branch_is_not_continued(
        looking: dict[str, Any], gh: FakeGh, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        head: str) -> None:
    monkeypatch.setenv("FAKE_GH_HEAD", head)
    found = pr_feedback.look(looking["repo"], looking["loop"], looking["tracked"])
    assert found.action == "drop" and "not continued" in found.why
    assert [c[:2] for c in gh.calls()[1:]] == [["pr", "view"], ["pr", "checks"]]  # no log


def test_gh_is_bounded_in_time_and_size(looking: dict[str, Any],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    looking["log"].write_bytes(HOSTILE * 1000 + b"y" * (10 * 2**20) + b"\nthe end\n")
    found = pr_feedback.look(looking["repo"], looking["loop"], looking["tracked"])
    assert found.action == "continue"
    assert len(found.logs["42"].encode()) <= LOG_TAIL and found.logs["42"].endswith("the end\n")
    monkeypatch.setenv("FAKE_GH_HANG", "checks")
    monkeypatch.setenv("LOOPCTL_GH_TIMEOUT", "0.5")
    began = time.monotonic()
    found = pr_feedback.look(looking["repo"], looking["loop"], looking["tracked"])
    assert found.action == "none" and "timed out after 0.5s" in found.why
    assert time.monotonic() - began < 20
    hung = [p for p in psutil.process_iter(["cmdline", "cwd"])
            if "fake_gh.py" in " ".join(p.info["cmdline"] or []) and "checks" in
            (p.info["cmdline"] or []) and p.info["cwd"] == looking["repo"]]
    assert hung == []  # killed, not left sleeping (only this test's gh: workers run alike)


def test_a_branch_checked_out_or_diverged_is_not_taken_over(
        looking: dict[str, Any], repo: Repo, tmp_path: Path) -> None:  # noqa: F811
    branch = looking["tracked"]["branch"]
    repo.git("checkout", "-q", "-b", branch)
    (repo.path / "pr.txt").write_text("pr\n")
    repo.git("add", "pr.txt")
    repo.git("commit", "-q", "-m", "the PR's commit")
    repo.git("push", "-q", "origin", branch)
    found = pr_feedback.look(looking["repo"], looking["loop"], looking["tracked"])
    folder = tmp_path / "wt"
    with pytest.raises(GitError, match="already"):  # the user's checkout has it
        pr_feedback.continue_branch(looking["loop"], "20261201T040000Z-0002", folder, found)
    repo.git("checkout", "-q", "main")
    ws = pr_feedback.continue_branch(looking["loop"], "20261201T040000Z-0002", folder, found)
    assert (ws.branch, ws.continues, ws.base_sha) == (branch, URL7, repo.sha(branch))
    subprocess.run(["git", "-C", str(repo.path), "worktree", "remove", "--force", str(folder)],
                   check=True)
    repo.git("branch", "-f", branch, "main")  # the local branch now lacks the PR's commit ...
    (repo.path / "other.txt").write_text("other\n")
    repo.git("checkout", "-q", branch)
    repo.git("add", "other.txt")
    repo.git("commit", "-q", "-m", "diverged")  # ... and has one of its own
    repo.git("checkout", "-q", "main")
    mine = repo.sha(branch)
    with pytest.raises(GitError, match="diverged"):
        pr_feedback.continue_branch(looking["loop"], "20261201T040000Z-0003", folder, found)
    assert repo.sha(branch) == mine  # kept as it was


def test_update_sets_and_clears_fix_attempts(cli: CLI, repo: Repo) -> None:  # noqa: F811
    cli("start", "p", "--name", "fx", "--every", "1h", "--cwd", str(repo.path), "--worktree",
        "--push", "origin", "--pr", "--fix-attempts", "5", check=0)
    assert cli.json("show", "fx")["definition"]["fix_attempts"] == 5
    assert cli.json("status", "fx")["workspace"]["fix_attempts"] == 5
    cli("update", "fx", "--no-pr", check=0)  # nothing to fix without a PR
    definition = cli.json("show", "fx")["definition"]
    assert "fix_attempts" not in definition and "pr" not in definition
    cli("update", "fx", "--pr", "--fix-attempts", "0", check=0)
    assert cli.json("show", "fx")["definition"]["fix_attempts"] == 0
    cli("update", "fx", "--fix-attempts", "3", check=0)  # the default: not written out
    assert "fix_attempts" not in cli.json("show", "fx")["definition"]
    for bad in ("-1", "101", "nan", "1e309", "--x"):
        proc = cli("update", "fx", "--fix-attempts", bad)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (bad, proc.stderr)
    assert cli.json("status", "fx")["workspace"]["fix_attempts"] == 3
    cli("update", "fx", "--no-worktree", check=0)
    assert cli.json("status", "fx")["workspace"] is None
