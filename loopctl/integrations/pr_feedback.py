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
from loopctl.integrations.gh import call

MAX_JSON = 2**20


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
    from loopctl.integrations import worktree as ws_mod
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
