"""PR feedback (DESIGN §16): ask `gh` about the loop's newest PR, and cut a
worktree from its head branch when a run continues it.

The commands, from gh's manual (cli.github.com/manual):
  gh pr view URL --json state,headRefName,isCrossRepository
  gh pr checks URL --json name,state,bucket,link,workflow
      exit 0 all passed, 1 some failed (or none reported), 8 some pending
  gh run view RUN-ID --log-failed -R HOST/OWNER/REPO
      "View the log for any failed steps in a run"
The PR is always named by the URL `gh pr create` printed, never by branch;
the run id comes from a check's link into the PR's own repository.

gh's answers are untrusted and bounded: each call is killed (its whole
session) after $LOOPCTL_GH_TIMEOUT seconds, its output read no further than
a bound (JSON: 1 MiB, else unusable; logs: only the tail is kept).
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from loopctl.domain.feedback import (
    CHECK_FIELDS,
    LOG_TAIL,
    PR_FIELDS,
    Plan,
    log_runs,
    plan,
    read_checks,
    read_pr,
    repo_of,
)
from loopctl.domain.plain import record
from loopctl.domain.untrusted import line

MAX_JSON = 2**20
MAX_STDERR = 2000


@record
class Answer:
    code: int | None       # None: gh could not start, or was killed at the timeout
    out: bytes
    err: str
    cut: bool = False      # more came than the bound


def timeout() -> float:
    from loopctl.settings import knob

    return knob("LOOPCTL_GH_TIMEOUT")


def call(args: list[str], cwd: str, limit: int, keep_tail: bool = False) -> Answer:
    """`gh ARGS`: at most `limit` bytes of stdout (its start, or with
    `keep_tail` its end), killed with its children at the timeout."""
    env = dict(os.environ, GH_PROMPT_DISABLED="1", NO_COLOR="1", GH_NO_UPDATE_NOTIFIER="1",
               GH_SPINNER_DISABLED="1")
    try:
        proc = subprocess.Popen(["gh", *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, close_fds=True)
    except OSError as exc:
        why = "gh (GitHub CLI) is not on PATH" if isinstance(exc, FileNotFoundError) \
            else f"gh could not start: {exc.strerror}"
        return Answer(None, b"", why)
    out, err, cut, finished = _read(proc, limit, keep_tail, time.monotonic() + timeout())
    if not finished:
        _kill(proc)
        return Answer(None, b"", f"gh {' '.join(args[:2])} timed out after {timeout():g}s")
    code = proc.wait()
    return Answer(code, out, line(err.decode("utf-8", "replace"))[-MAX_STDERR:], cut)


def _read(proc: subprocess.Popen[bytes], limit: int, keep_tail: bool,
          deadline: float) -> tuple[bytes, bytes, bool, bool]:
    """Both pipes until they close or the deadline passes; never more than
    the bounds in memory."""
    assert proc.stdout is not None and proc.stderr is not None
    out, err, cut = bytearray(), bytearray(), False
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(out), bytes(err), cut, False
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buf: bytearray = key.data
                buf += chunk
                bound = limit if buf is out else MAX_STDERR * 4
                if len(buf) > bound:
                    cut = cut or buf is out
                    if keep_tail or buf is err:
                        del buf[: len(buf) - bound]
                    else:
                        del buf[bound:]
    return bytes(out), bytes(err), cut, True


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()
    proc.wait()


def look(repo: str, loop: Any, tracked: dict[str, Any]) -> Plan:
    """What to do about the PR the loop follows (`tracked`, from its state)."""
    url = str(tracked["url"])
    view = call(["pr", "view", url, "--json", PR_FIELDS], repo, MAX_JSON)
    if view.code != 0 or view.cut:
        return Plan("none", url, str(tracked["branch"]),
                    why=f"gh pr view failed: {view.err or f'exit {view.code}'}"[:300])
    checks = call(["pr", "checks", url, "--json", CHECK_FIELDS], repo, MAX_JSON)
    if checks.code is None:
        return Plan("none", url, str(tracked["branch"]), why=f"gh pr checks: {checks.err}"[:300])
    usable = checks.code in (0, 1, 8) and not checks.cut and checks.out.strip()
    found = plan(read_pr(view.out), read_checks(checks.out) if usable else
                 ([] if checks.code == 1 else None),
                 tracked, loop.branch_prefix, loop.name, loop.fix_attempts)
    if found.action == "continue":
        where = repo_of(url)
        for run in log_runs(found) if where else []:
            answer = call(["run", "view", run, "--log-failed", "-R", str(where)], repo,
                          LOG_TAIL, keep_tail=True)
            found.logs[run] = answer.out.decode("utf-8", "replace") if answer.code == 0 \
                else f"(no log: {answer.err or f'exit {answer.code}'})"
    return found


def continue_branch(loop: Any, run_id: str, folder: Path, found: Plan) -> Any:
    """The worktree of a run that continues the PR: its head branch as the
    remote has it (or the local branch, when that only adds commits a failed
    push left), checked out at `folder`. Raises GitError when it cannot."""
    from loopctl.integrations import workspace as ws_mod
    from loopctl.integrations.copying import copy_ignored
    from loopctl.integrations.git import GitError, git, last_line

    repo, _ = ws_mod.repository(os.path.expanduser(loop.cwd))
    subdir = os.path.relpath(os.path.realpath(os.path.expanduser(loop.cwd)),
                             os.path.realpath(repo))
    remote, branch = str(loop.push), found.branch
    tracking = f"refs/remotes/{remote}/{branch}"
    fetched = git(repo, "fetch", "--quiet", remote, f"+refs/heads/{branch}:{tracking}",
                  check=False)
    if fetched.returncode != 0:
        raise GitError(f"fetch of {branch} from {remote} failed: {last_line(fetched)}")
    theirs = git(repo, "rev-parse", "--verify", "--quiet", f"{tracking}^{{commit}}").stdout.strip()
    start = _start_point(repo, branch, theirs)
    ws_mod.discard(repo, folder)
    # -B: the branch (re)set to `start`; git refuses when another worktree,
    # the user's checkout among them, has it checked out.
    git(repo, "worktree", "add", "--quiet", "-B", branch, str(folder), start)
    admin = ws_mod.find_admin(ws_mod.common_dir(repo), folder)
    if admin is None:
        raise GitError(f"git worktree add made no record of {folder}")
    ws = ws_mod.Workspace(repo, folder, branch, loop.base or "HEAD", f"{remote}/{branch}", start,
                          "" if subdir == "." else subdir, None, str(admin),
                          continues=found.url)
    try:
        if ws_mod.escaped(ws):  # an earlier agent's commit: this one would start outside
            raise GitError(f"{ws.subdir} on the PR's branch is not a folder of the worktree "
                           "(a symlink out of it?)")
        copy_ignored(repo, folder, loop.copy)
    except Exception:
        ws_mod.remove(ws)
        raise
    return ws


def _start_point(repo: str, branch: str, theirs: str) -> str:
    """The PR's head, or the local branch when it only adds to it; a local
    branch that diverged (the PR was force-pushed) is not overwritten."""
    from loopctl.integrations.git import GitError, git

    ours = git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}",
               check=False).stdout.strip()
    if not ours or ours == theirs or _ancestor(repo, ours, theirs):
        return theirs
    if _ancestor(repo, theirs, ours):
        return ours  # commits an earlier run could not push: they go with this one
    raise GitError(f"the local branch {branch} and the PR's have diverged; not continued "
                   "(the local one is kept)")


def _ancestor(repo: str, older: str, newer: str) -> bool:
    from loopctl.integrations.git import git

    return git(repo, "merge-base", "--is-ancestor", older, newer,
               check=False).returncode == 0
