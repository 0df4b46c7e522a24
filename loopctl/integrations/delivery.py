"""Delivering a run's work (DESIGN §12, §15): what the agent left in its
worktree (integrations/worktree.py) is committed on the run branch and
handed off as a branch, a draft PR or a merge. Only the run branch moves;
the user's checkout is never touched.

The hand-off is three steps the supervisor orders, each with data in and out:

    commit(ws, message, run_id, max_file_size) -> Commit   never raises
    remove(ws)                                             never raises (worktree.py)
    hand_off(ws, loop, commit, title, body, cancelled) -> Handoff   never raises

`cancelled()` is asked before each step that reaches outside the machine
(push, PR, ready, merge) and while checks are pending: `stop --kill`,
`pause` or SIGTERM during a hand-off stop it at the next step. `finish`
runs the three in order.

Only the supervisor calls this module; every git and gh call is a real
subprocess with a timeout.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loopctl.domain.errors import LoopctlError
from loopctl.domain.untrusted import plain
from loopctl.fast.data_class import factory, record
from loopctl.integrations import gh as github
from loopctl.integrations.git import (
    GitError,
    drivers_off,
    git,
    last_line,
    named_drivers,
    run,
    tree_git,
)
from loopctl.integrations.worktree import Workspace, remove, restore_link

PUSH_ATTEMPTS = 3
IDENTITY = ("loopctl", "loopctl@localhost")
DEFAULT_MAX_FILE_SIZE = 50 * 2**20
LEFT_OUT_SHOWN = 50       # of the files left out, how many the PR body names


@record
class Commit:
    """What `commit` made of the agent's leftovers."""

    info: dict[str, Any] = factory(dict)       # summarize(): branch, head, commits, diffstat
    left_out: list[dict[str, Any]] = factory(list)  # {"path", "bytes"}: over --max-file-size
    oversized: list[str] = factory(list)       # in the agent's own commits: never pushed
    note: str | None = None                    # the agent switched branches
    failure: str | None = None                 # nothing could be committed: why


@record
class Handoff:
    """What became of a run's work; merged into its record."""

    handoff: str = "no_change"
    fields: dict[str, Any] = factory(dict)
    failure: str | None = None      # handoff_failed: why
    review: str | None = None       # needs_review: why

    def record(self) -> dict[str, Any]:
        out = {"handoff": self.handoff, **self.fields}
        if self.failure:
            out["handoff_error"] = self.failure
        if self.review:
            out["needs_review"] = self.review
        return out


# -- step 1: commit --------------------------------------------------------------------


def identity(repo: str) -> dict[str, str]:
    """Author and committer: the repository's identity, else loopctl's."""
    email = git(repo, "config", "user.email", check=False).stdout.strip()
    name = git(repo, "config", "user.name", check=False).stdout.strip()
    name, email = name or IDENTITY[0], email or IDENTITY[1]
    return {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}


def commit(ws: Workspace, message: str, run_id: str,
           max_file_size: int = DEFAULT_MAX_FILE_SIZE, onto: str | None = None) -> Commit:
    """Commit whatever the agent left uncommitted (any outcome) on the run
    branch, and nothing but the run branch moves. With `onto` (the base,
    when the agent's own commits touched a protected path) the one commit
    sits on it and the agent's commits are left out. Never raises."""
    try:
        return _commit(ws, message, run_id, max_file_size, onto)
    except (LoopctlError, OSError) as exc:
        reason = exc.message if isinstance(exc, LoopctlError) else str(exc)
        return Commit(failure=reason)


def _commit(ws: Workspace, message: str, run_id: str, max_file_size: int,
            onto: str | None = None) -> Commit:
    if not ws.admin or not Path(ws.admin).is_dir():
        raise GitError("the worktree's record in the repository is gone")
    if not ws.path.is_dir() or ws.path.is_symlink():
        raise GitError("the worktree folder is gone")
    restore_link(ws)
    listed = tree_git(ws.admin, ws.path, "ls-files", "-z", "--cached", "--others",
                      "--exclude-standard").stdout.split("\0")
    env = drivers_off(named_drivers(ws.admin, ws.path, [p for p in listed if p]))
    left_out = _too_big(ws, env, max_file_size)
    specs = "".join(f":(exclude,literal){item['path']}\0" for item in left_out)
    tree_git(ws.admin, ws.path, "add", "--all", "--pathspec-from-file=-",
             "--pathspec-file-nul", env=env, stdin=".\0" + specs)
    tree = tree_git(ws.admin, ws.path, "write-tree", env=env).stdout.strip()
    parent = tree_git(ws.admin, ws.path, "rev-parse", "--verify", f"{onto or 'HEAD'}^{{commit}}",
                      env=env).stdout.strip()
    head = parent
    if tree != tree_git(ws.admin, ws.path, "rev-parse", f"{parent}^{{tree}}").stdout.strip():
        head = tree_git(ws.admin, ws.path, "commit-tree", "--no-gpg-sign", tree, "-p", parent,
                        "-m", message, "-m", f"Loopctl-Run: {run_id}",
                        env={**env, **identity(ws.repo)}).stdout.strip()
    # Only the run branch moves, whatever HEAD the agent left: a HEAD
    # pointed at the user's `main` must not carry loopctl's commit there.
    tree_git(ws.admin, ws.path, "update-ref", f"refs/heads/{ws.branch}", head)
    current = tree_git(ws.admin, ws.path, "symbolic-ref", "--quiet", "--short", "HEAD",
                       check=False).stdout.strip()
    note = None
    if current != ws.branch:
        note = f"the agent switched to {plain(current) or 'a detached HEAD'}; " \
               f"its work is on {ws.branch}"
    info = summarize(ws)
    return Commit(info, left_out, oversized(ws.repo, ws.base_sha, head, max_file_size), note)


def _too_big(ws: Workspace, env: dict[str, str], limit: int) -> list[dict[str, Any]]:
    """New or changed files over the limit: never hashed into the repository."""
    changed = tree_git(ws.admin, ws.path, "ls-files", "-z", "--others", "--modified",
                       "--exclude-standard", env=env).stdout.split("\0")
    out = []
    for path in sorted({p for p in changed if p}):
        try:
            size = os.lstat(ws.path / path).st_size
        except OSError:
            continue  # deleted: nothing to add
        if size > limit and not (ws.path / path).is_symlink():
            out.append({"path": path, "bytes": size})
    return out


def oversized(repo: str, base: str, head: str, limit: int) -> list[str]:
    """Files over the limit in commits beyond the base (the agent's own)."""
    objects = git(repo, "rev-list", "--objects", f"{base}..{head}").stdout
    if not objects.strip():
        return []
    checked = run(["-C", repo, "cat-file",
                   "--batch-check=%(objecttype) %(objectsize) %(rest)"],
                  stdin=objects, what="cat-file").stdout
    found = []
    for line in checked.splitlines():
        kind, size, *rest = line.split(" ", 2) + [""]
        if kind == "blob" and int(size) > limit:
            found.append(plain(rest[0]) or "?")
    return found


def summarize(ws: Workspace) -> dict[str, Any]:
    """Commits beyond the base on the run branch, and their diffstat."""
    head = git(ws.repo, "rev-parse", f"refs/heads/{ws.branch}").stdout.strip()
    commits = int(git(ws.repo, "rev-list", "--count", f"{ws.base_sha}..{head}").stdout)
    stat = git(ws.repo, "diff-tree", "-r", "--shortstat", "--no-ext-diff", "--no-textconv",
               ws.base_sha, head).stdout
    numbers = {key: int(m.group(1)) if (m := re.search(rf"(\d+) {word}", stat)) else 0
               for key, word in (("files_changed", "file"), ("insertions", "insertion"),
                                 ("deletions", "deletion"))}
    return {"branch": ws.branch, "base": ws.base, "base_ref": ws.base_ref, "head": head,
            "commits": commits, **numbers}


# -- step 3: hand off --------------------------------------------------------------------


def hand_off(ws: Workspace, loop: Any, made: Commit, title: str, body: str,
             cancelled: Callable[[], bool] = lambda: False) -> Handoff:
    """Push, open the PR, merge, as far as the loop asks and `cancelled()`
    lets it. Run after `remove` (a branch checked out in a worktree cannot
    be deleted). Never raises: a failed hand-off keeps the branch."""
    if made.failure:
        return Handoff("handoff_failed", {"branch": ws.branch, "base": ws.base},
                       failure=f"commit: {made.failure}")
    notes = [n for n in (ws.note, made.note) if n]
    result = Handoff()
    if made.left_out:
        result.fields["left_out"] = made.left_out
    if made.info.get("commits", 0) == 0:
        if not ws.continues:  # a PR's branch stays, whatever this run did
            git(ws.repo, "branch", "--quiet", "-D", ws.branch, check=False)
    else:
        result.handoff = "committed"
        result.fields.update(made.info)
        if loop.push:
            _remote(ws, loop, made, result, title, body + left_out_text(made),
                    _checkpoint(cancelled, notes))
    if notes:
        result.fields["handoff_note"] = "; ".join(notes)
    return result


def _checkpoint(cancelled: Callable[[], bool], notes: list[str]) -> Callable[[str], bool]:
    """`stop_before(step)`: True (and a note saying where) once cancelled,
    and from then on: a cancel is never taken back."""
    seen: list[str] = []

    def stop_before(step: str) -> bool:
        if not seen and cancelled():
            seen.append(step)
            notes.append(f"hand-off cancelled before {step}")
        return bool(seen)

    return stop_before


def _remote(ws: Workspace, loop: Any, made: Commit, result: Handoff, title: str, body: str,
            stop_before: Callable[[str], bool]) -> None:
    if made.oversized:
        result.handoff, result.failure = "handoff_failed", (
            f"not pushed: the run's commits hold files over --max-file-size: "
            f"{', '.join(made.oversized[:5])}")
        return
    try:
        if stop_before("the push"):
            return
        push(ws, loop.push)
        result.handoff = "pushed"
        if ws.continues:  # the push updated the PR
            pr, result.handoff = ws.continues, "pr_updated"
        elif not loop.pr or stop_before("gh pr create"):
            return
        else:
            pr, result.handoff = github.open_pr(ws.repo, ws.base, ws.branch, title, body), \
                "pr_opened"
        result.fields["pr_url"] = pr
        if loop.merge:
            _merge(ws, loop, pr, result, stop_before)
    except LoopctlError as exc:
        result.handoff, result.failure = "handoff_failed", exc.message


def _merge(ws: Workspace, loop: Any, pr: str, result: Handoff,
           stop_before: Callable[[str], bool]) -> None:
    """Merge once every check passed; otherwise leave the PR for a person.
    Cancelled while waiting: `stop_before` notes it at the next step."""
    verdict = github.wait_for_checks(ws.repo, pr, loop.checks_timeout,
                                     lambda: stop_before("gh pr ready"))
    if stop_before("gh pr ready"):
        return
    if verdict is not None:
        result.handoff, result.review = "needs_review", verdict
        return
    github.ready(ws.repo, pr)
    if stop_before("gh pr merge"):
        return
    github.merge(ws.repo, pr, loop.merge)
    result.handoff, result.fields["merged"] = "merged", True


def left_out_text(made: Commit) -> str:
    """The PR body's list of what the hand-off did not commit."""
    if not made.left_out:
        return ""
    lines = [f"- `{plain(item['path'])[:200]}` ({item['bytes']} bytes)"
             for item in made.left_out[:LEFT_OUT_SHOWN]]
    more = len(made.left_out) - LEFT_OUT_SHOWN
    if more > 0:
        lines.append(f"- and {more} more")
    return "\nLeft out (over --max-file-size):\n" + "\n".join(lines) + "\n"


def push(ws: Workspace, remote: str) -> None:
    for attempt in range(PUSH_ATTEMPTS):
        proc = git(ws.repo, "push", "--quiet", "--no-verify", remote,
                   f"refs/heads/{ws.branch}:refs/heads/{ws.branch}", check=False)
        if proc.returncode == 0:
            return
        if attempt + 1 < PUSH_ATTEMPTS:
            time.sleep(2 ** attempt)
    raise GitError(f"push to {remote} failed: {last_line(proc)}")


def finish(ws: Workspace, loop: Any, run_id: str, message: str, pr_body: str,
           cancelled: Callable[[], bool] = lambda: False) -> Handoff:
    """commit, remove, hand_off: the whole hand-off in the usual order."""
    made = commit(ws, message, run_id, getattr(loop, "max_file_size", DEFAULT_MAX_FILE_SIZE))
    remove(ws)
    return hand_off(ws, loop, made, message, pr_body, cancelled)
