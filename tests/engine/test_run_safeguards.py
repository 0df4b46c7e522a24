"""Safeguards of a run that no other test pinned down (issue 23), each with
real processes, git and signals: the hand-off finishes whatever signals
arrive while it works; the agent's decision file is never followed through a
symlink; the `loopctl` shim on the agent's PATH never imports a `loopctl`
package from the agent's folder; loopctl's own commits run none of the
repository's hooks; a push is tried three times with a back-off."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from integrations.test_workspace import EDIT, Repo, last_record, make_repo, start

from conftest import CLI, wait_for
from loopctl.engine import procs
from loopctl.integrations import delivery
from loopctl.integrations.git import GitError
from loopctl.integrations.worktree import Workspace

RUN_ID = "20261201T030000Z-0001"


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return make_repo(tmp_path)


def sh(script: str) -> str:
    return shlex.join(["sh", "-c", script])


# -- the hand-off and signals ------------------------------------------------------------


def pending_or_handled(pid: int, signums: tuple[int, ...]) -> bool:
    """Whether any of `signums` is still pending for `pid` (/proc status)."""
    mask = sum(1 << (s - 1) for s in signums)
    with open(f"/proc/{pid}/status") as handle:
        fields = dict(line.split(":", 1) for line in handle if ":" in line)
    return any(int(fields[key].strip(), 16) & mask for key in ("SigPnd", "ShdPnd"))


def test_the_hand_off_finishes_whatever_signals_arrive_while_it_pushes(
        cli: CLI, repo: Repo, tmp_path: Path) -> None:
    inside, release = tmp_path / "in-hook", tmp_path / "release"
    hook = repo.remote / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\ncat >/dev/null\ntouch {shlex.quote(str(inside))}\n"
                    f"while [ ! -e {shlex.quote(str(release))} ]; do sleep 0.05; done\n")
    hook.chmod(0o755)
    start(cli, repo, "steady", EDIT, "--push", "origin")
    cli("tick", check=0)
    wait_for(inside.exists)  # the supervisor is in the hand-off, pushing
    run = cli.state()["loops"]["steady"]["run"]
    pid = run["supervisor"]["pid"]
    signums = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    for signum in signums:
        os.kill(pid, signum)
    wait_for(lambda: not pending_or_handled(pid, signums))  # each one delivered
    release.touch()
    wait_for(lambda: not procs.alive(run["supervisor"]))
    record = last_record(cli, "steady")
    assert (record["outcome"], record["handoff"]) == ("ok", "pushed"), record
    assert repo.remote_sha(record["branch"]) == record["head"]
    assert cli.state()["loops"]["steady"]["run"] is None


# -- the decision file -------------------------------------------------------------------


@pytest.mark.parametrize("how", ["file", "symlink"])
def test_a_decision_file_the_agent_made_a_symlink_is_not_followed(
        cli: CLI, tmp_path: Path, how: str) -> None:
    """A symlink lets the agent point loopctl at any file; loopctl reads the
    decision only from a regular file at its own path (the control: the same
    bytes written as a file complete the loop)."""
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"version": 1, "decision": "complete", "summary": "done",
                                     "evidence": "all green"}))
    put = "cp" if how == "file" else "ln -sf"
    cli("start", "p", "--name", "linked", "--every", "1h",
        "--command", sh(f'{put} {shlex.quote(str(elsewhere))} "$LOOPCTL_DECISION_FILE"'),
        check=0)
    cli("run", "linked", check=0)
    record = last_record(cli, "linked")
    status = cli.json("status", "linked")["status"]
    if how == "file":
        assert (record["decision"] or {}).get("decision") == "complete", record
        assert status == "completed"
    else:
        assert record["decision"] is None, record
        assert status == "active"


# -- the decide shim ---------------------------------------------------------------------


def test_the_decide_shim_never_imports_loopctl_from_the_agents_folder(
        cli: CLI, tmp_path: Path) -> None:
    work = tmp_path / "work"
    planted = work / "loopctl"
    planted.mkdir(parents=True)
    marker = tmp_path / "planted-loopctl-imported"
    (planted / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (planted / "entry.py").write_text("def main():\n    raise SystemExit(0)\n")
    cli("start", "p", "--name", "shim", "--every", "1h", "--cwd", str(work),
        "--command", sh("loopctl decide complete --summary done --evidence checked"), check=0)
    cli("run", "shim", check=0)
    assert not marker.exists(), "the shim imported the agent's loopctl package"
    record = last_record(cli, "shim")
    assert record["decision"]["decision"] == "complete", record
    assert cli.json("status", "shim")["status"] == "completed"


# -- loopctl's commits -------------------------------------------------------------------


def test_loopctls_commit_runs_none_of_the_repositorys_hooks(
        cli: CLI, repo: Repo, tmp_path: Path) -> None:
    """The hooks are the repository owner's, and the worktree holds what the
    agent wrote: a pre-commit hook would run on it (and may refuse it)."""
    marker = tmp_path / "hooks-ran"
    for name in ("pre-commit", "commit-msg", "prepare-commit-msg", "post-commit"):
        hook = repo.path / ".git" / "hooks" / name
        hook.write_text(f"#!/bin/sh\necho {name} >> {shlex.quote(str(marker))}\nexit 1\n")
        hook.chmod(0o755)
    start(cli, repo, "hooked", EDIT)
    cli("run", "hooked", check=0)
    record = last_record(cli, "hooked")
    assert (record["handoff"], record.get("commits")) == ("committed", 1), \
        record.get("handoff_error")
    assert repo.git("show", f"{record['branch']}:new.txt") == "a\nb\n"
    assert not marker.exists(), marker.read_text()


def test_a_hook_the_agent_plants_never_runs_in_the_hand_off(
        cli: CLI, repo: Repo, tmp_path: Path) -> None:
    """The agent runs as the user and can write the repository's hooks
    folder: whatever it plants there must not run in loopctl's hand-off,
    after the agent's processes were killed and outside its timeout."""
    marker = tmp_path / "planted-hook-ran"
    plant = ('hooks="$(git rev-parse --git-common-dir)/hooks"; '
             'for h in pre-commit prepare-commit-msg post-commit pre-push '
             'reference-transaction post-checkout; do '
             f'printf "#!/bin/sh\\necho $h >> {shlex.quote(str(marker))}\\n" > "$hooks/$h"; '
             'chmod +x "$hooks/$h"; done; echo work > new.txt')
    start(cli, repo, "plant", plant, "--push", "origin")
    cli("run", "plant", check=0)
    assert last_record(cli, "plant")["handoff"] == "pushed"
    assert not marker.exists(), marker.read_text()


# -- the push retry ----------------------------------------------------------------------


def flaky_remote(remote: Path, fails: int, counter: Path) -> None:
    """The remote refuses the first `fails` pushes."""
    hook = remote / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\ncat >/dev/null\nn=$(cat {counter} 2>/dev/null || echo 0)\n"
                    f"n=$((n + 1)); echo $n > {counter}\n"
                    f"if [ $n -le {fails} ]; then echo 'busy, try again' >&2; exit 1; fi\n")
    hook.chmod(0o755)


@pytest.mark.parametrize("fails", [0, 2, 3])
def test_a_push_is_tried_three_times_with_a_back_off(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails: int) -> None:
    repo = make_repo(tmp_path)
    counter = tmp_path / "pushes"
    flaky_remote(repo.remote, fails, counter)
    sha = repo.sha("main")
    ws = Workspace(str(repo.path), tmp_path / "wt", f"loopctl/job/{RUN_ID}", "main", "main", sha)
    repo.git("branch", ws.branch, sha)
    slept: list[float] = []
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:  # the back-off, without its wait
        # (subprocess's own polls of git sleep too, for milliseconds)
        slept.append(seconds) if seconds >= 0.5 else real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
    if fails < 3:
        delivery.push(ws, "origin")
        assert repo.remote_sha(ws.branch) == sha
    else:
        with pytest.raises(GitError, match=r"^push to origin failed: "):
            delivery.push(ws, "origin")
        assert repo.remote_sha(ws.branch) is None
    assert int(counter.read_text()) == min(fails + 1, 3)
    assert slept == [1, 2][:min(fails, 2)]


def test_a_flaky_remote_still_gets_the_runs_branch(cli: CLI, repo: Repo,
                                                   tmp_path: Path) -> None:
    """The same through a run: one refused push, then the hand-off pushes."""
    counter = tmp_path / "pushes"
    flaky_remote(repo.remote, 1, counter)
    start(cli, repo, "flaky", EDIT, "--push", "origin")
    cli("run", "flaky", check=0)
    record = last_record(cli, "flaky")
    assert record["handoff"] == "pushed", record
    assert repo.remote_sha(record["branch"]) == record["head"]
    assert counter.read_text().strip() == "2"


def test_pending_or_handled_reads_a_blocked_signal(tmp_path: Path) -> None:
    """The helper the signal test waits on: a blocked SIGTERM stays pending."""
    code = ("import signal, sys, time\n"
            "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n"
            "print('ready', flush=True)\nsys.stdin.read()\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        assert not pending_or_handled(child.pid, (signal.SIGTERM,))
        os.kill(child.pid, signal.SIGTERM)
        wait_for(lambda: pending_or_handled(child.pid, (signal.SIGTERM,)))
    finally:
        child.kill()
        child.wait()
