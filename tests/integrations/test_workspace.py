"""`--worktree` workspaces with real git (DESIGN §12): each run works in a
worktree of its own on `loopctl/<loop>/<run-id>`, the user's checkout is never
touched, and the hand-off (commit, push, draft PR, merge) never loses work.

Every test gets its own repository with a local bare remote (a copy); `gh` is the
fake in tests/workspace/fake_gh.py, put first on PATH only where a test wants it.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from workspace.fake_gh import refusals
from workspace.repos import OWNER, Repo, git, make_repo  # imported from here too

from conftest import CLI, TESTS, wait_for
from loopctl.engine import procs

FAKE_GH = TESTS / "workspace" / "fake_gh.py"
PR_URL = "https://github.com/o/r/pull/7"


# -- git helpers: tests/workspace/repos.py ------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return make_repo(tmp_path)


def without_gh_path() -> str:
    """PATH minus any directory holding a real `gh`."""
    dirs = os.environ.get("PATH", os.defpath).split(os.pathsep)
    return os.pathsep.join(d for d in dirs if d and not os.path.exists(os.path.join(d, "gh")))


@dataclass
class FakeGh:
    bin: Path
    log: Path

    def env(self, **extra: str) -> dict[str, str]:
        return {"PATH": f"{self.bin}{os.pathsep}{without_gh_path()}",
                "FAKE_GH_LOG": str(self.log), **extra}

    def calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [json.loads(line)["argv"] for line in self.log.read_text().splitlines()]


@pytest.fixture
def gh(tmp_path: Path) -> Iterator[FakeGh]:
    folder = tmp_path / "gh-bin"
    folder.mkdir()
    script = folder / "gh"
    script.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} "
                      f"{shlex.quote(str(FAKE_GH))} \"$@\"\n")
    script.chmod(0o755)
    fake = FakeGh(folder, tmp_path / "gh.jsonl")
    yield fake
    # loopctl asked only about the PR it opened (never the base branch's).
    assert refusals(fake.log) == []


# -- loopctl helpers -------------------------------------------------------------------


def start(cli: CLI, repo: Repo | Path, name: str, script: str, *extra: str,
          worktree: bool = True, env: dict[str, str] | None = None,
          check: int | None = 0) -> subprocess.CompletedProcess[str]:
    """A loop whose agent is `sh -c SCRIPT`, run in the repository."""
    cwd = repo.path if isinstance(repo, Repo) else repo
    return cli("start", "the objective", "--name", name, "--every", "1h", "--cwd", str(cwd),
               *(["--worktree"] if worktree else []), *extra,
               "--command", shlex.join(["sh", "-c", script]), env=env, check=check)


def last_record(cli: CLI, name: str) -> dict[str, Any]:
    records = cli.records(name)
    assert records, f"no run record for {name}"
    return records[-1]


def worktree_dir(cli: CLI, name: str) -> Path:
    return cli.state_dir / "worktrees" / name


def events(cli: CLI) -> list[dict[str, Any]]:
    path = cli.state_dir / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def snapshot(path: Path) -> dict[str, Any]:
    """Everything about a checkout that a run must leave alone."""
    files = {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
             if p.relative_to(path).parts[0] != ".git" and p.is_file()}
    return {
        "head": git(path, "rev-parse", "HEAD"),
        "symbolic": git(path, "symbolic-ref", "HEAD"),
        "status": git(path, "status", "--porcelain=v1", "--untracked-files=all", "--ignored"),
        "index": git(path, "ls-files", "-s"),
        "stash": git(path, "stash", "list"),
        "files": files,
    }


# -- 1. options ------------------------------------------------------------------------


def test_worktree_outside_a_git_repository_is_refused(cli: CLI, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    proc = start(cli, plain, "nogit", "true", check=2)
    assert "git repository" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert cli("show", "nogit").returncode != 0


@pytest.mark.parametrize("args", [
    pytest.param(["--pr"], id="pr-without-push"),
    pytest.param(["--push", "origin", "--merge", "squash"], id="merge-without-pr"),
    pytest.param(["--push", "origin", "--pr", "--merge", "bogus"], id="merge-bogus"),
    pytest.param(["--base=-x"], id="base-option-like"),
    pytest.param(["--base", "a..b"], id="base-dotdot"),
    pytest.param(["--branch-prefix", "x"], id="prefix-without-slash"),
])
def test_bad_workspace_options_exit_2(cli: CLI, repo: Repo, args: list[str]) -> None:
    proc = start(cli, repo, "bad", "true", *args, check=2)
    assert "Traceback" not in proc.stderr
    assert cli("show", "bad").returncode != 0


@pytest.mark.parametrize("args", [
    pytest.param(["--push", "origin"], id="push"),
    pytest.param(["--push", "origin", "--pr"], id="push-pr"),
])
def test_handoff_options_need_worktree(cli: CLI, repo: Repo, args: list[str]) -> None:
    proc = start(cli, repo, "noworktree", "true", *args, worktree=False, check=2)
    assert "Traceback" not in proc.stderr


def test_base_defaults_to_the_branch_checked_out_at_start(cli: CLI, repo: Repo) -> None:
    start(cli, repo, "onmain", "true")
    assert cli.json("show", "onmain")["definition"]["base"] == "main"
    repo.git("checkout", "-q", "-b", "dev")
    start(cli, repo, "ondev", "true")
    assert cli.json("show", "ondev")["definition"]["base"] == "dev"


# -- 2. the checkout is never touched --------------------------------------------------

BUSY_AGENT = r"""
case "$LOOPCTL_ITERATION" in
1) printf 'edited by run 1\n' >> README.md; mkdir -p src; echo new > src/new.txt;
   echo agent-scratch > scratch.txt ;;
2) echo mine > mine.txt; git add mine.txt; git commit -q -m 'agent commit';
   echo staged > staged2.txt; git add staged2.txt; echo loose > untracked.txt;
   echo SECRET=agent > .env; rm README.md ;;
3) git checkout -q -b other; echo on-other >> README.md; git commit -q -a -m 'on other';
   echo after-switch > after.txt ;;
esac
"""


def dirty_checkout(repo: Repo) -> None:
    """A checkout mid-work: a stash, staged and unstaged edits, untracked and ignored files."""
    with open(repo.path / "README.md", "a") as handle:
        handle.write("stashed line\n")
    repo.git("stash", "-q")
    (repo.path / "staged.txt").write_text("staged by the user\n")
    repo.git("add", "staged.txt")
    with open(repo.path / "README.md", "a") as handle:
        handle.write("unstaged user edit\n")
    (repo.path / "scratch.txt").write_text("the user's scratch\n")
    (repo.path / ".env").write_text("SECRET=user\n")


def test_checkout_is_never_touched(cli: CLI, repo: Repo) -> None:
    dirty_checkout(repo)
    before = snapshot(repo.path)
    assert before["stash"] and "?? scratch.txt" in before["status"]
    assert "!! .env" in before["status"]
    start(cli, repo, "busy", BUSY_AGENT)
    for _ in range(3):
        cli("run", "busy", check=0)
    assert snapshot(repo.path) == before
    assert repo.worktrees() == [str(repo.path)]
    records = cli.records("busy")
    assert [r["outcome"] for r in records] == ["ok"] * 3
    assert [r["handoff"] for r in records] == ["committed"] * 3
    assert not worktree_dir(cli, "busy").exists()


def test_agent_switching_branches_keeps_its_work_on_the_run_branch(
        cli: CLI, repo: Repo) -> None:
    start(cli, repo, "switch", "git checkout -q -b other; echo on-other >> README.md; "
          "git commit -q -a -m 'on other'; echo after > after.txt")
    cli("run", "switch", check=0)
    record = last_record(cli, "switch")
    branch = f"loopctl/switch/{record['run_id']}"
    assert record["branch"] == branch
    assert record["handoff"] == "committed"
    # The work the record points at is on the branch it names.
    assert repo.sha(branch) == record["head"]
    assert "on-other" in repo.git("show", f"{branch}:README.md")
    assert repo.git("show", f"{branch}:after.txt") == "after\n"


# -- 3. the run's branch and commit ----------------------------------------------------

EDIT = "printf 'hello\\nchanged\\n' > README.md; printf 'a\\nb\\n' > new.txt"


def test_leftovers_are_committed_on_the_run_branch(cli: CLI, repo: Repo) -> None:
    base = repo.sha("main")
    start(cli, repo, "edit", EDIT)
    cli("run", "edit", check=0)
    record = last_record(cli, "edit")
    run_id = record["run_id"]
    branch = f"loopctl/edit/{run_id}"
    assert record["outcome"] == "ok"
    assert record["handoff"] == "committed"
    assert record["branch"] == branch and record["base"] == "main"
    assert record["head"] == repo.sha(branch)
    assert (record["commits"], record["files_changed"], record["insertions"],
            record["deletions"]) == (1, 2, 3, 1)
    assert "pr_url" not in record and "merged" not in record
    assert repo.sha(f"{branch}^") == base
    message = repo.git("log", "-1", "--format=%B", branch)
    assert message.startswith("loopctl: edit run 1: ")
    trailer = repo.git("log", "-1", "--format=%(trailers:key=Loopctl-Run,valueonly)", branch)
    assert trailer.strip() == run_id
    who = repo.git("log", "-1", "--format=%an <%ae>|%cn <%ce>", branch).strip()
    assert who == f"{OWNER[0]} <{OWNER[1]}>|{OWNER[0]} <{OWNER[1]}>"
    assert repo.git("show", f"{branch}:new.txt") == "a\nb\n"


def test_commit_identity_falls_back_to_loopctl(cli: CLI, tmp_path: Path) -> None:
    empty = tmp_path / "empty-home"
    empty.mkdir()
    repo = make_repo(tmp_path, "anon", identity=False)
    env = {"HOME": str(empty), "XDG_CONFIG_HOME": str(empty / ".config"),
           "GIT_CONFIG_NOSYSTEM": "1"}
    assert subprocess.run(["git", "-C", str(repo.path), "config", "user.email"],
                          env=dict(os.environ, **env), capture_output=True).returncode != 0
    # The shell preset: the prompt is the script, run by `sh -c` without an envelope.
    cli("start", "echo change >> README.md", "--name", "anon", "--every", "1h",
        "--cwd", str(repo.path), "--worktree", env=env, check=0)
    cli("run", "anon", env=env, check=0)
    record = last_record(cli, "anon")
    assert record["handoff"] == "committed"
    branch = record["branch"]
    who = repo.git("log", "-1", "--format=%an <%ae>|%cn <%ce>", branch).strip()
    assert who == "loopctl <loopctl@localhost>|loopctl <loopctl@localhost>"
    assert repo.git("show", f"{branch}:README.md") == "hello\nworld\nchange\n"


def test_no_change_deletes_the_branch(cli: CLI, repo: Repo) -> None:
    start(cli, repo, "idle", "true")
    cli("run", "idle", check=0)
    record = last_record(cli, "idle")
    assert record["outcome"] == "ok"
    assert record["handoff"] == "no_change"
    assert repo.branches() == []
    assert not worktree_dir(cli, "idle").exists()


@pytest.mark.parametrize(("extra", "handoff"), [
    pytest.param(["--push", "origin"], "pushed", id="push"),
    pytest.param(["--push", "origin", "--pr"], "pr_opened", id="pr"),
    pytest.param(["--push", "origin", "--pr", "--merge", "squash"], "merged", id="merge"),
])
def test_handoff_levels(cli: CLI, repo: Repo, gh: FakeGh, extra: list[str],
                        handoff: str) -> None:
    env = gh.env()
    start(cli, repo, "ship", EDIT, *extra, env=env)
    cli("run", "ship", env=env, check=0)
    record = last_record(cli, "ship")
    branch = f"loopctl/ship/{record['run_id']}"
    assert record["outcome"] == "ok"
    assert record["handoff"] == handoff, record
    assert record["branch"] == branch and record["base"] == "main"
    assert record["commits"] == 1
    assert repo.remote_sha(branch) == record["head"] == repo.sha(branch)
    calls = gh.calls()
    if handoff == "pushed":
        assert calls == [] and "pr_url" not in record
        return
    assert record["pr_url"] == PR_URL
    create = calls[0]
    assert create[:3] == ["pr", "create", "--draft"]
    assert create[create.index("--base") + 1] == "main"
    assert create[create.index("--head") + 1] == branch
    if handoff == "merged":
        assert record["merged"] is True
        # Addressed by the URL `gh pr create` printed, never by branch.
        assert calls[1][:3] == ["pr", "checks", PR_URL]
        assert ["pr", "ready", PR_URL] in calls
        assert calls[-1] == ["pr", "merge", PR_URL, "--squash"]
        assert calls.index(["pr", "ready", PR_URL]) < len(calls) - 1
    else:
        assert "merged" not in record
        assert not any(c[:2] in (["pr", "merge"], ["pr", "ready"]) for c in calls)


# -- 4. the worktree goes after every run ----------------------------------------------


@pytest.mark.parametrize(("tail", "outcome", "code"), [
    pytest.param("", "ok", 0, id="ok"),
    pytest.param("; exit 1", "failed", 1, id="exit-1"),
    pytest.param("; sleep 30", "timeout", 124, id="timeout"),
])
def test_worktree_removed_after_run(cli: CLI, repo: Repo, tmp_path: Path, tail: str,
                                    outcome: str, code: int) -> None:
    where = tmp_path / "pwd.txt"
    # Only the run meant to time out gets a short timeout: a loaded CI machine
    # must not turn the others into timeouts.
    start(cli, repo, "wt", f"pwd > {shlex.quote(str(where))}; echo work > work.txt{tail}",
          "--timeout", "2s" if outcome == "timeout" else "60s")
    cli("run", "wt", env={"LOOPCTL_KILL_GRACE": "1"}, check=code)
    record = last_record(cli, "wt")
    assert record["outcome"] == outcome
    folder = worktree_dir(cli, "wt")
    assert os.path.realpath(where.read_text().strip()) == os.path.realpath(folder)
    assert not folder.exists()
    assert repo.worktrees() == [str(repo.path)]
    # What the agent wrote is kept whatever the outcome.
    assert record["handoff"] == "committed"
    assert repo.git("show", f"{record['branch']}:work.txt") == "work\n"


def test_worktree_removed_after_stop_kill(cli: CLI, repo: Repo, tmp_path: Path) -> None:
    where, gate = tmp_path / "pwd.txt", tmp_path / "gate"
    start(cli, repo, "halt", f"echo work > work.txt; pwd > {shlex.quote(str(where))}; "
          f"while [ ! -e {shlex.quote(str(gate))} ]; do sleep 0.1; done")
    cli("tick", check=0)
    wait_for(where.exists)
    folder = worktree_dir(cli, "halt")
    assert os.path.realpath(where.read_text().strip()) == os.path.realpath(folder)
    assert folder.is_dir()
    cli("stop", "--kill", "halt", check=0)
    record = wait_for(lambda: cli.records("halt") and cli.records("halt")[-1])
    gate.touch()  # nothing should be waiting on it any more
    assert record["outcome"] == "killed"
    assert not folder.exists()
    assert repo.worktrees() == [str(repo.path)]
    assert record["handoff"] == "committed"


# -- 5. a killed supervisor ------------------------------------------------------------


@pytest.mark.parametrize("commits", [True, False], ids=["committed", "uncommitted"])
def test_killed_supervisor_leaves_no_worktree(cli: CLI, repo: Repo, tmp_path: Path,
                                              commits: bool) -> None:
    ready, gate = tmp_path / "ready", tmp_path / "gate"
    work = ("echo work > work.txt; git add work.txt; git commit -q -m agent-work"
            if commits else "echo work > work.txt")
    start(cli, repo, "doomed", f"{work}; touch {shlex.quote(str(ready))}; "
          f"while [ ! -e {shlex.quote(str(gate))} ]; do sleep 0.1; done")
    cli("tick", check=0)
    wait_for(ready.exists)
    run = wait_for(lambda: (cli.state()["loops"]["doomed"].get("run") or {}).get("agent")
                   and cli.state()["loops"]["doomed"]["run"])
    folder = worktree_dir(cli, "doomed")
    assert folder.is_dir()
    os.kill(run["supervisor"]["pid"], signal.SIGKILL)
    wait_for(lambda: not psutil.pid_exists(run["supervisor"]["pid"])
             or not procs.alive(run["supervisor"]))
    os.killpg(run["agent"]["pid"], signal.SIGKILL)  # the agent leads its own group
    wait_for(lambda: not procs.alive(run["agent"]))
    report = cli.json("tick")
    assert run["run_id"] in report["lost"]
    assert report["fired"] == []
    record = next(r for r in cli.records("doomed") if r["run_id"] == run["run_id"])
    assert record["outcome"] == "lost"
    assert "worktree removed" in record["note"]
    branch = f"loopctl/doomed/{run['run_id']}"
    if commits:
        assert f"branch {branch} kept" in record["note"]
        assert repo.git("show", f"{branch}:work.txt") == "work\n"
    else:
        assert repo.branches() == []
    assert not folder.exists()
    assert repo.worktrees() == [str(repo.path)]


# -- 6. hand-off failures --------------------------------------------------------------


def reject_pushes(remote: Path) -> None:
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'pre-receive: rejected by the test' >&2\nexit 1\n")
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def assert_handoff_failed(cli: CLI, repo: Repo, name: str, mention: str) -> dict[str, Any]:
    record = last_record(cli, name)
    assert record["outcome"] == "ok", record
    assert record["handoff"] == "handoff_failed", record
    assert mention in record["handoff_error"]
    branch = f"loopctl/{name}/{record['run_id']}"
    assert record["branch"] == branch
    assert repo.branches() == [branch]
    assert repo.git("show", f"{branch}:new.txt") == "a\nb\n"
    assert any(e.get("reason") == "handoff_failed" and e.get("loop") == name
               for e in events(cli))
    assert cli.json("status", name)["last_handoff"]["handoff"] == "handoff_failed"
    assert not worktree_dir(cli, name).exists()
    return record


def test_rejected_push_keeps_the_branch(cli: CLI, repo: Repo) -> None:
    reject_pushes(repo.remote)
    start(cli, repo, "rejected", EDIT, "--push", "origin")
    cli("run", "rejected", check=0)
    record = assert_handoff_failed(cli, repo, "rejected", "push")
    assert repo.remote_sha(record["branch"]) is None


def test_push_to_a_missing_remote_keeps_the_branch(cli: CLI, repo: Repo,
                                                   tmp_path: Path) -> None:
    repo.git("remote", "add", "gone", str(tmp_path / "missing.git"))
    start(cli, repo, "gone", EDIT, "--push", "gone")
    cli("run", "gone", check=0)
    assert_handoff_failed(cli, repo, "gone", "push")


def test_pr_without_gh_keeps_the_branch(cli: CLI, repo: Repo) -> None:
    env = {"PATH": without_gh_path()}
    start(cli, repo, "nogh", EDIT, "--push", "origin", "--pr", env=env)
    cli("run", "nogh", env=env, check=0)
    record = assert_handoff_failed(cli, repo, "nogh", "gh")
    assert repo.remote_sha(record["branch"]) == record["head"]  # the push itself worked


@pytest.mark.parametrize("step", ["create", "ready", "merge"])
def test_gh_failure_keeps_the_branch(cli: CLI, repo: Repo, gh: FakeGh, step: str) -> None:
    env = gh.env(FAKE_GH_FAIL=step)
    start(cli, repo, "ghfail", EDIT, "--push", "origin", "--pr", "--merge", "squash", env=env)
    cli("run", "ghfail", env=env, check=0)
    assert_handoff_failed(cli, repo, "ghfail", step)


def test_failing_checks_need_review(cli: CLI, repo: Repo, gh: FakeGh) -> None:
    checks = [{"name": "lint", "state": "FAILURE", "bucket": "fail"},
              {"name": "ci", "state": "SUCCESS", "bucket": "pass"}]
    env = gh.env(FAKE_GH_CHECKS=json.dumps(checks))
    start(cli, repo, "review", EDIT, "--push", "origin", "--pr", "--merge", "squash", env=env)
    cli("run", "review", env=env, check=0)
    record = last_record(cli, "review")
    assert record["outcome"] == "ok"
    assert record["handoff"] == "needs_review", record
    assert "lint" in record["needs_review"]
    assert record["pr_url"] == PR_URL
    assert not record.get("merged")
    assert any(e.get("reason") == "needs_review" and e.get("loop") == "review"
               for e in events(cli))
    calls = gh.calls()
    assert any(c[:2] == ["pr", "checks"] for c in calls)
    assert not any(c[:2] == ["pr", "merge"] for c in calls)
    assert cli.json("status", "review")["last_handoff"]["handoff"] == "needs_review"
    assert repo.branches() == [record["branch"]]


# -- 7. the base comes from the remote -------------------------------------------------


def test_push_loop_branches_from_the_fetched_base(cli: CLI, repo: Repo, tmp_path: Path) -> None:
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", "-b", "main", str(repo.remote), str(other))
    (other / "upstream.txt").write_text("from elsewhere\n")
    git(other, "add", "upstream.txt")
    git(other, "-c", "user.name=Other", "-c", "user.email=other@example.com",
        "commit", "-q", "-m", "upstream change")
    git(other, "push", "-q", "origin", "main")
    upstream = git(other, "rev-parse", "HEAD").strip()
    stale = repo.sha("main")
    assert upstream != stale
    start(cli, repo, "fresh", EDIT, "--push", "origin")
    cli("run", "fresh", check=0)
    record = last_record(cli, "fresh")
    assert record["handoff"] == "pushed"
    assert repo.sha(f"{record['branch']}^") == upstream
    assert repo.git("show", f"{record['branch']}:upstream.txt") == "from elsewhere\n"
    assert repo.sha("refs/heads/main") == stale  # the local branch is not moved


# -- 8. two loops, one repository ------------------------------------------------------


def test_two_loops_share_a_repository(cli: CLI, repo: Repo) -> None:
    for name in ("left", "right"):
        start(cli, repo, name, f"echo {name} > {name}.txt", "--push", "origin")
    before = snapshot(repo.path)
    cli("tick", "--wait", check=0)
    heads = set()
    for name in ("left", "right"):
        record = last_record(cli, name)
        assert record["outcome"] == "ok", record
        assert record["handoff"] == "pushed", record
        assert record["branch"] == f"loopctl/{name}/{record['run_id']}"
        assert repo.git("show", f"{record['branch']}:{name}.txt") == f"{name}\n"
        assert repo.remote_sha(record["branch"]) == record["head"]
        heads.add(record["head"])
    assert len(heads) == 2
    assert repo.worktrees() == [str(repo.path)]
    assert snapshot(repo.path) == before


# -- 9. rm -----------------------------------------------------------------------------


def test_rm_removes_worktree_and_pushed_branches(cli: CLI, repo: Repo) -> None:
    start(cli, repo, "tidy", 'echo "$LOOPCTL_RUN_ID" > run.txt')
    cli("run", "tidy", check=0)
    cli("run", "tidy", check=0)
    pushed, unpushed = (r["branch"] for r in cli.records("tidy"))
    repo.git("push", "-q", "origin", pushed)
    folder = worktree_dir(cli, "tidy")  # as a killed supervisor would have left it
    repo.git("worktree", "add", "-q", "--detach", str(folder))
    assert len(repo.worktrees()) == 2
    result = cli.json("rm", "tidy")
    assert result["removed"] is True
    assert result["kept_branches"] == [unpushed]
    assert repo.branches() == [unpushed]
    assert not folder.exists()
    assert repo.worktrees() == [str(repo.path)]


# -- 10. doctor ------------------------------------------------------------------------


def test_doctor_warns_about_a_stray_worktree(cli: CLI, repo: Repo) -> None:
    start(cli, repo, "watched", "true")
    stray = cli.state_dir / "worktrees" / "ghost"
    stray.mkdir(parents=True)
    report = json.loads(cli("doctor", "--json").stdout)
    found = [f for f in report["findings"] if f["check"] == "worktrees" and "ghost" in
             f["message"]]
    assert found and found[0]["level"] == "warn", report["findings"]


# -- 11. the envelope ------------------------------------------------------------------


@pytest.mark.parametrize(("extra", "base_ref"), [
    pytest.param([], "main", id="local"),
    pytest.param(["--push", "origin"], "origin/main", id="fetched"),
])
def test_envelope_names_branch_and_base(cli: CLI, repo: Repo, tmp_path: Path,
                                        extra: list[str], base_ref: str) -> None:
    seen = tmp_path / "claude.jsonl"
    env = {"PATH": f"{TESTS / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "FAKE_RECORD": str(seen)}
    cli("start", "improve the docs", "--name", "env", "--every", "1h", "--cwd", str(repo.path),
        "--worktree", "--agent", "claude", *extra, "--sandbox", "off", env=env, check=0)
    cli("run", "env", env=env, check=0)
    record = last_record(cli, "env")
    prompt = json.loads(seen.read_text().splitlines()[0])["argv"][-1]
    assert prompt.startswith("improve the docs")
    assert f"branch loopctl/env/{record['run_id']}" in prompt
    assert f"from {base_ref}" in prompt
    assert "Do not push" in prompt
    assert record["handoff"] == "no_change"
