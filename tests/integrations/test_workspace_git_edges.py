"""The git and gh edges of `--worktree` (DESIGN §12), with real git in a
temporary repository and the fake `gh` of tests/workspace/fake_gh.py: git's
own locks are waited for, missing tools and timeouts are clear errors,
`--copy` never follows a symlink out, a worktree the agent broke still hands
off safely, PR checks that never come are not merged, and the cleanup after
a lost run never follows a symlink planted in its place."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from workspace.fake_gh import refusals

from conftest import TESTS
from loopctl.domain.errors import LoopctlError, UsageError
from loopctl.domain.model import parse_loop
from loopctl.fast.data_class import replace
from loopctl.integrations import delivery
from loopctl.integrations import gh as github
from loopctl.integrations import git as gitrun
from loopctl.integrations.copying import copy_ignored
from loopctl.integrations.git import GitError
from loopctl.integrations.worktree import Workspace, cleanup_lost, discard, prepare, repository

FAKE_GH = TESTS / "workspace" / "fake_gh.py"
RUN_ID = "20261201T030000Z-0001"
PR = "https://github.com/o/r/pull/7"


def run_git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True,
                          env=dict(os.environ, LC_ALL="C"))
    assert proc.returncode == 0, (args, proc.stderr)
    return proc.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    run_git(tmp_path, "init", "-q", "-b", "main", str(path))
    run_git(path, "config", "user.name", "Owner")
    run_git(path, "config", "user.email", "owner@example.com")
    (path / "README.md").write_text("hello\n")
    (path / ".gitignore").write_text("*.env\nlocal/\n")
    run_git(path, "add", "README.md", ".gitignore")
    run_git(path, "commit", "-q", "-m", "initial")
    return path


def branches(repo: Path) -> list[str]:
    return run_git(repo, "branch", "--format=%(refname:short)").split()


# -- running git -------------------------------------------------------------------------


def test_git_waits_for_another_git_to_release_its_index_lock(repo: Path) -> None:
    (repo / "new.txt").write_text("x\n")
    lock = repo / ".git" / "index.lock"
    lock.write_text("")
    releaser = threading.Timer(0.5, lock.unlink)
    releaser.start()
    try:
        gitrun.git(repo, "add", "new.txt")
    finally:
        releaser.join()
    assert "new.txt" in run_git(repo, "diff", "--cached", "--name-only")


def test_a_lock_never_released_fails_with_gits_reason(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gitrun, "LOCK_RETRIES", 2)  # 0.6 s of waiting, not 12.6 s
    (repo / "new.txt").write_text("x\n")
    (repo / ".git" / "index.lock").write_text("")
    with pytest.raises(GitError) as info:
        gitrun.git(repo, "add", "new.txt")
    assert info.value.message.startswith("git add new.txt failed: fatal: Unable to create")
    assert "index.lock" in info.value.message


def test_a_failing_git_names_gits_own_reason_unless_unchecked(repo: Path) -> None:
    with pytest.raises(GitError, match=r"^git rev-parse --verify failed: fatal: "):
        gitrun.git(repo, "rev-parse", "--verify", "no-such-branch")
    proc = gitrun.git(repo, "rev-parse", "--verify", "no-such-branch", check=False)
    assert proc.returncode != 0


def test_a_git_that_outlives_its_timeout_is_an_error(repo: Path) -> None:
    with pytest.raises(GitError, match=r"^git log timed out after 1e-06s$"):
        gitrun.git(repo, "log", timeout=0.000001)


def test_without_git_on_path_worktree_loops_are_refused_clearly(
        repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(UsageError, match="--worktree needs git, which is not on PATH"):
        repository(str(repo))
    with pytest.raises(UsageError, match="git is not installed; --worktree needs it"):
        gitrun.git(repo, "status")


@pytest.mark.parametrize("prefix", ["bots", "-x/", "a..b/", "/abs/", "a b/"])
def test_a_bad_branch_prefix_is_refused(prefix: str) -> None:
    with pytest.raises(UsageError, match=r"bad --branch-prefix .*ending in /, like loopctl/"):
        gitrun.check_prefix(prefix)
    assert gitrun.check_prefix("bots/nightly/") == "bots/nightly/"


# -- --copy ----------------------------------------------------------------------------


def test_copy_takes_regular_files_inside_the_repository_and_no_symlinks(
        repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "stolen.env").write_text("SECRET=outside\n")
    (repo / "app.env").write_text("TOKEN=1\n")
    (repo / "link.env").symlink_to(outside / "stolen.env")
    (repo / "local").symlink_to(outside)             # a folder leading out
    worktree = tmp_path / "wt"
    run_git(repo, "worktree", "add", "-q", "-b", "run", str(worktree))
    copy_ignored(str(repo), worktree, ("*.env", "local/*.env"))
    assert sorted(p.name for p in worktree.iterdir()) == [".git", ".gitignore", "README.md",
                                                          "app.env"]
    assert (worktree / "app.env").read_text() == "TOKEN=1\n"


def test_copy_never_writes_through_a_symlink_committed_in_the_worktree(
        repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo / "conf").mkdir()
    (repo / "conf" / "db.env").write_text("DB=1\n")
    (repo / "settings.env").write_text("S=1\n")
    worktree = tmp_path / "wt"
    run_git(repo, "worktree", "add", "-q", "-b", "run", str(worktree))
    # What the base commit could hold: `conf` a symlink out, and a link
    # standing where a copied file would go.
    (worktree / "conf").symlink_to(outside)
    (worktree / "settings.env").symlink_to(outside / "planted")
    copy_ignored(str(repo), worktree, ("conf/*.env", "*.env"))
    assert list(outside.iterdir()) == []
    assert (worktree / "settings.env").is_symlink()


# -- removing worktrees ------------------------------------------------------------------


def test_remove_unlinks_a_symlink_in_place_of_the_worktree_and_keeps_its_target(
        repo: Path, tmp_path: Path) -> None:
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("keep\n")
    folder = tmp_path / "worktrees" / "job"
    folder.parent.mkdir()
    folder.symlink_to(precious)
    discard(str(repo), folder)
    assert not folder.exists() and not folder.is_symlink()
    assert (precious / "keep.txt").read_text() == "keep\n"


def test_remove_deletes_a_folder_git_does_not_know(repo: Path, tmp_path: Path) -> None:
    folder = tmp_path / "worktrees" / "job"
    (folder / "deep").mkdir(parents=True)
    (folder / "deep" / "file").write_text("x")
    discard(str(repo), folder)
    assert not folder.exists()


def test_cleanup_after_a_lost_run_never_follows_a_planted_symlink(
        repo: Path, tmp_path: Path) -> None:
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("keep\n")
    folder = tmp_path / "worktrees" / "job"
    folder.parent.mkdir()
    folder.symlink_to(precious)
    note = cleanup_lost({"repo": str(repo), "branch": "main"}, folder, "job", RUN_ID)
    assert note == "worktree folder removed; its recorded repository or branch was not usable"
    assert not folder.is_symlink() and (precious / "keep.txt").exists()


def lost_worktree(repo: Path, tmp_path: Path, commit: bool) -> tuple[dict[str, str], Path]:
    """What a killed supervisor leaves: a worktree on the run's branch."""
    branch = f"loopctl/job/{RUN_ID}"
    folder = tmp_path / "worktrees" / "job"
    base_sha = run_git(repo, "rev-parse", "HEAD").strip()
    run_git(repo, "worktree", "add", "-q", "-b", branch, str(folder), base_sha)
    if commit:
        (folder / "work.txt").write_text("done\n")
        run_git(folder, "add", "work.txt")
        run_git(folder, "commit", "-q", "-m", "work")
    return {"repo": str(repo), "branch": branch, "base_sha": base_sha}, folder


def test_cleanup_after_a_lost_run_keeps_a_branch_with_commits(
        repo: Path, tmp_path: Path) -> None:
    info, folder = lost_worktree(repo, tmp_path, commit=True)
    note = cleanup_lost(info, folder, "job", RUN_ID)
    assert note == f"worktree removed; branch {info['branch']} kept (1 commit(s))"
    assert not folder.exists() and info["branch"] in branches(repo)


def test_cleanup_after_a_lost_run_keeps_the_branch_when_its_commits_cannot_be_counted(
        repo: Path, tmp_path: Path) -> None:
    info, folder = lost_worktree(repo, tmp_path, commit=True)
    info["base_sha"] = "0123456789abcdef0123456789abcdef01234567"  # no such commit
    note = cleanup_lost(info, folder, "job", RUN_ID)
    assert "could not be counted" in note
    assert not folder.exists()
    assert info["branch"] in branches(repo)


# -- the hand-off ------------------------------------------------------------------------


def test_a_worktree_whose_link_the_agent_removed_still_commits_on_the_run_branch(
        repo: Path, tmp_path: Path) -> None:
    loop = parse_loop("job", {"prompt": "p", "every": "1h", "cwd": str(repo),
                              "worktree": True})
    folder = tmp_path / "worktrees" / "job"
    ws = prepare(loop, RUN_ID, folder)
    (folder / "work.txt").write_text("half done\n")
    (folder / ".git").unlink()  # the agent removed the worktree's link to the repository
    handoff = delivery.finish(ws, loop, RUN_ID, "message", "body")
    # loopctl's record of the worktree, not its `.git` link, names the repository.
    assert handoff.handoff == "committed", handoff
    assert run_git(repo, "show", f"{ws.branch}:work.txt") == "half done\n"
    assert not folder.exists()
    assert run_git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_a_worktree_whose_record_is_gone_hands_off_as_failed_and_is_removed(
        repo: Path, tmp_path: Path) -> None:
    loop = parse_loop("job", {"prompt": "p", "every": "1h", "cwd": str(repo),
                              "worktree": True})
    folder = tmp_path / "worktrees" / "job"
    ws = prepare(loop, RUN_ID, folder)
    (folder / "work.txt").write_text("half done\n")
    import shutil

    shutil.rmtree(ws.admin)
    handoff = delivery.finish(ws, loop, RUN_ID, "message", "body")
    assert handoff.handoff == "handoff_failed"
    assert handoff.failure == "commit: the worktree's record in the repository is gone"
    assert handoff.record()["branch"] == ws.branch
    assert not folder.exists()
    assert ws.branch in branches(repo)  # kept: a person may want to look


@pytest.fixture
def fake_gh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path / "gh-bin"
    folder.mkdir()
    script = folder / "gh"
    script.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} "
                      f"{shlex.quote(str(FAKE_GH))} \"$@\"\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    log = tmp_path / "gh.jsonl"
    monkeypatch.setenv("FAKE_GH_LOG", str(log))
    yield log
    # loopctl asked only about the PR it opened (never the base branch's).
    assert refusals(log) == []


def ws_for(repo: Path, tmp_path: Path) -> Workspace:
    sha = run_git(repo, "rev-parse", "HEAD").strip()
    return Workspace(str(repo), tmp_path / "wt", f"loopctl/job/{RUN_ID}", "main", "main", sha)


def merge_after_checks(repo: Path, tmp_path: Path) -> delivery.Handoff:
    """Open the run's PR and hand it to `merge()` with a 0.3 s checks timeout,
    as the hand-off does after the push."""
    ws = ws_for(repo, tmp_path)
    loop = parse_loop("job", {"prompt": "p", "every": "1h", "cwd": str(repo), "worktree": True,
                              "push": "origin", "pr": True, "merge": "squash"})
    loop = replace(loop, checks_timeout=0.3)  # below the 1 s a definition can say
    pr = github.open_pr(str(repo), "main", ws.branch, "title", "body")
    result = delivery.Handoff("pr_opened", {"pr_url": pr})
    delivery._merge(ws, loop, pr, result, lambda step: False)
    return result


def gh_calls(log: Path) -> list[list[str]]:
    return [json.loads(line)["argv"] for line in log.read_text().splitlines()]


def assert_left_for_review(result: delivery.Handoff, log: Path, verdict: str) -> None:
    assert (result.handoff, result.review) == ("needs_review", verdict), result
    assert "merged" not in result.fields
    calls = gh_calls(log)
    assert ["pr", "checks", PR, "--json", "name,state,bucket"] in calls
    assert not any(c[:2] in (["pr", "ready"], ["pr", "merge"]) for c in calls), calls


@pytest.mark.parametrize("answer", ["[]", "gh: this output is not JSON", '{"ci": "pass"}'])
def test_a_pr_whose_checks_never_appear_is_not_merged(
        repo: Path, tmp_path: Path, fake_gh: Path, monkeypatch: pytest.MonkeyPatch,
        answer: str) -> None:
    monkeypatch.setenv("FAKE_GH_CHECKS", answer)
    result = merge_after_checks(repo, tmp_path)
    assert_left_for_review(result, fake_gh, "no checks reported: not merged without them")


def test_a_pr_whose_checks_stay_pending_is_not_merged(
        repo: Path, tmp_path: Path, fake_gh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_GH_CHECKS", '[{"name": "ci", "bucket": "pending"}]')
    result = merge_after_checks(repo, tmp_path)
    assert_left_for_review(result, fake_gh, "checks still pending after 0.3s")


def test_a_pr_whose_checks_pass_is_merged(repo: Path, tmp_path: Path, fake_gh: Path) -> None:
    """The control for the two above: the same call merges when checks pass."""
    result = merge_after_checks(repo, tmp_path)
    assert (result.handoff, result.fields.get("merged")) == ("merged", True), result
    assert gh_calls(fake_gh)[-1] == ["pr", "merge", PR, "--squash"]


def test_the_fake_gh_refuses_a_pr_it_did_not_open(repo: Path, tmp_path: Path,
                                                 fake_gh: Path) -> None:
    """What makes the fixtures' check mean something: asking about the base
    branch (or any branch without a PR) is refused as gh refuses it."""
    ws = ws_for(repo, tmp_path)
    github.open_pr(str(repo), "main", ws.branch, "title", "body")
    proc = github.gh("pr", "checks", "main", "--json", "name", cwd=str(repo))
    assert (proc.returncode, proc.stderr.strip()) == \
        (1, 'no pull requests found for branch "main"')
    assert refusals(fake_gh) == ['gh pr checks main --json name: no pull requests found '
                                 'for branch "main"']
    fake_gh.write_text("")  # seen: the fixture's own check stays for the other tests


def test_without_gh_a_pr_cannot_be_opened_and_says_why(
        repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = ws_for(repo, tmp_path)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(LoopctlError, match=r"^gh \(GitHub CLI\) is not on PATH; install it "):
        github.open_pr(ws.repo, ws.base, ws.branch, "title", "body")


def test_a_gh_that_outlives_its_timeout_is_an_error(
        repo: Path, tmp_path: Path, fake_gh: Path) -> None:
    with pytest.raises(GitError, match=r"^gh pr checks timed out$"):
        github.gh("pr", "checks", "x", cwd=str(repo), timeout=0.000001)
    # On a loaded machine the fake may get as far as refusing branch "x"
    # before the kill lands: not a question loopctl asked about a PR it opened.
    fake_gh.unlink(missing_ok=True)
