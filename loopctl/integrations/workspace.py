"""Isolated workspaces (DESIGN §12, §15): each run of a `--worktree` loop works
in a git worktree of its own, on branch `<prefix><loop>/<run-id>` cut from
the base, and what it leaves is committed and handed off as a branch, a draft
PR or a merge. The user's checkout is never touched: every git command here
runs against the worktree (named by loopctl's record of it, never by its
`.git` link) or the repository's refs, never its working files.

The hand-off is three steps the supervisor orders, each with data in and out:

    commit(ws, message, run_id, max_file_size) -> Commit   never raises
    remove(ws)                                             never raises
    hand_off(ws, loop, commit, title, body, cancelled) -> Handoff   never raises

`cancelled()` is asked before each step that reaches outside the machine
(push, PR, ready, merge) and while checks are pending: `stop --kill`,
`pause` or SIGTERM during a hand-off stop it at the next step. `finish`
runs the three in order.

Only the supervisor (and the driver cleaning up after a lost run, and `rm`)
calls this module; every git and gh call is a real subprocess with a timeout.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loopctl.domain.errors import LoopctlError, UsageError
from loopctl.domain.plain import factory, record
from loopctl.domain.untrusted import plain
from loopctl.integrations import gh as github
from loopctl.integrations.copying import copy_ignored
from loopctl.integrations.git import (
    GitError,
    check_prefix,
    check_ref,
    drivers_off,
    git,
    last_line,
    named_drivers,
    run,
    tree_git,
)

__all__ = ["GitError", "check_prefix", "check_ref", "git", "last_line"]

PUSH_ATTEMPTS = 3
NO_CHECKS_AFTER = 180.0   # a PR with no checks reported by then is "no checks": never merged
IDENTITY = ("loopctl", "loopctl@localhost")
DEFAULT_MAX_FILE_SIZE = 50 * 2**20
LEFT_OUT_SHOWN = 50       # of the files left out, how many the PR body names


@record
class Workspace:
    repo: str          # the repository's top level (the user's checkout)
    path: Path         # the worktree
    branch: str
    base: str          # what the user named (`main`)
    base_ref: str      # what the branch was cut from (`origin/main` after a fetch)
    base_sha: str
    subdir: str = ""   # where `--cwd` sits inside the repository
    note: str | None = None
    # The worktree's git directory (`<repo>/.git/worktrees/<id>`), read when
    # loopctl made the worktree, before any agent ran in it.
    admin: str = ""
    # The PR this run continues (DESIGN §16): `branch` is that PR's head
    # branch, never deleted here, and the hand-off pushes to it (no new PR).
    continues: str | None = None

    @property
    def cwd(self) -> str:
        return str(self.path / self.subdir) if self.subdir else str(self.path)

    def to_json(self) -> dict[str, Any]:
        return {"repo": self.repo, "path": str(self.path), "branch": self.branch,
                "base": self.base, "base_ref": self.base_ref, "base_sha": self.base_sha,
                "admin": self.admin, **({"continues": self.continues} if self.continues else {})}


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


def repository(cwd: str) -> tuple[str, str | None]:
    """(top level, checked-out branch or None when detached) of `cwd`; exit 2
    when git is missing or `cwd` is not in a repository."""
    if shutil.which("git") is None:
        raise UsageError("--worktree needs git, which is not on PATH")
    top = git(cwd, "rev-parse", "--show-toplevel", check=False)
    if top.returncode != 0:
        raise UsageError(f"--worktree: {cwd} is not in a git repository")
    head = git(cwd, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    return top.stdout.strip(), head.stdout.strip() or None


def has_remote(repo: str, remote: str) -> bool:
    return git(repo, "remote", "get-url", remote, check=False).returncode == 0


def check_handoff_targets(repo: str, base: str, remote: str | None) -> None:
    """At `start`/`update`: the base a run branches from and the remote it
    pushes to exist now, rather than failing every run later."""
    if remote is not None and not has_remote(repo, remote):
        raise UsageError(f"bad --push {remote!r}: {repo} has no remote of that name; "
                         "add it with `git remote add` (see `git remote -v`)")
    refs = [f"refs/heads/{base}", f"{base}^{{commit}}"]
    if remote is not None:
        refs.insert(0, f"refs/remotes/{remote}/{base}")
    for ref in refs:
        if git(repo, "rev-parse", "--verify", "--quiet", ref, check=False).returncode == 0:
            return
    raise UsageError(f"bad --base {base!r}: {repo} has no such branch"
                     + (f" (nor {remote}/{base})" if remote else "")
                     + "; see `git branch -a`")
def common_dir(repo: str) -> Path:
    out = git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir").stdout
    return Path(out.strip())


# -- a run's worktree ------------------------------------------------------------------


def prepare(loop: Any, run_id: str, folder: Path) -> Workspace:
    """A fresh worktree at `folder` on a new branch from the base, with the
    `--copy` files in it. A copy that fails removes the worktree again."""
    repo, _ = repository(os.path.expanduser(loop.cwd))
    subdir = os.path.relpath(os.path.realpath(os.path.expanduser(loop.cwd)),
                             os.path.realpath(repo))
    base = loop.base or "HEAD"
    base_ref = base
    note = None
    if loop.push and has_remote(repo, loop.push):
        # Never branch from a stale local copy of the base, unless the remote
        # cannot be reached: then the run still happens (its hand-off will say
        # why it failed) rather than losing the fire.
        fetched = git(repo, "fetch", "--quiet", loop.push, base, check=False)
        if fetched.returncode == 0:
            base_ref = f"{loop.push}/{base}"
        else:
            note = f"fetch from {loop.push} failed ({last_line(fetched)}); branched from {base}"
    base_sha = git(repo, "rev-parse", "--verify", "--quiet",
                   f"{base_ref}^{{commit}}").stdout.strip()
    branch = f"{loop.branch_prefix}{loop.name}/{run_id}"
    discard(repo, folder)
    git(repo, "worktree", "add", "--quiet", "-b", branch, str(folder), base_sha)
    admin = _admin_of(repo, folder)
    ws = Workspace(repo, folder, branch, base, base_ref, base_sha,
                   "" if subdir == "." else subdir, note, str(admin))
    try:
        if escaped(ws):  # a merged run may have committed it: the agent would start there
            raise GitError(f"{ws.subdir} on {base_ref} is not a folder of the worktree (a "
                           "symlink out of it?); the run does not start there")
        copy_ignored(repo, folder, loop.copy)
    except LoopctlError:
        remove(ws)
        git(repo, "branch", "--quiet", "-D", branch, check=False)
        raise
    return ws


def escaped(ws: Workspace) -> bool:
    """Is the loop's folder in the worktree no folder of it? Agent commits
    (a PR branch a run continues, a merged run) or the agent itself can make
    it a symlink to anywhere: whatever runs there would run outside."""
    real, top = os.path.realpath(ws.cwd), os.path.realpath(ws.path)
    return not ((real == top or real.startswith(top + os.sep)) and os.path.isdir(real))


def _admin_of(repo: str, folder: Path) -> Path:
    """The git directory `worktree add` just made for `folder`: found by its
    `gitdir` back-link, and inside the repository's own `worktrees/`."""
    found = find_admin(common_dir(repo), folder)
    if found is None:
        raise GitError(f"git worktree add made no record of {folder}")
    return found


def find_admin(common: Path, folder: Path) -> Path | None:
    """The `worktrees/<id>` folder whose `gitdir` names `folder/.git`: git's
    record of that one worktree, whether or not the folder still exists."""
    wanted = os.path.join(os.path.realpath(folder), ".git")
    admins = common / "worktrees"
    try:
        entries = sorted(admins.iterdir())
    except OSError:
        return None
    for entry in entries:
        try:
            named = (entry / "gitdir").read_text().strip()
        except (OSError, UnicodeDecodeError):
            continue
        if not entry.is_symlink() and os.path.realpath(named) == wanted:
            return entry
    return None


def restore_link(ws: Workspace) -> None:
    """Put back the worktree's `.git` file as git wrote it: whatever the agent
    left there (a file naming another git directory, a folder, a symlink)
    goes, so that `git worktree remove` and nothing else reads it."""
    link = ws.path / ".git"
    if link.is_dir() and not link.is_symlink():
        shutil.rmtree(link)
    elif link.exists() or link.is_symlink():
        link.unlink()  # a file, a symlink, a fifo: never followed, never read
    fd = os.open(link, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as handle:
        handle.write(f"gitdir: {ws.admin}\n")


def remove(ws: Workspace) -> None:
    """Remove this run's worktree and git's record of it, nothing else: no
    repository-wide prune (a user's worktree on an unmounted drive keeps its
    metadata). Never raises."""
    try:
        if ws.admin and ws.path.is_dir() and not ws.path.is_symlink():
            restore_link(ws)
        discard(ws.repo, ws.path)
    except (LoopctlError, OSError):
        _delete_folder(ws.path)


def discard(repo: str, folder: Path) -> None:
    """Remove the worktree at `folder` (loopctl's own path) and its record in
    the repository; nothing if there is none."""
    admin = find_admin(common_dir(repo), folder)
    if admin is not None and folder.is_dir() and not folder.is_symlink():
        git(repo, "worktree", "remove", "--force", "--force", str(folder), check=False)
    _delete_folder(folder)
    if admin is not None and admin.is_dir():
        shutil.rmtree(admin, ignore_errors=True)


def _delete_folder(folder: Path) -> None:
    if folder.is_symlink():
        folder.unlink()
    elif folder.exists():
        shutil.rmtree(folder, ignore_errors=True)


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


# -- after a lost run, and for doctor / rm ---------------------------------------------


def cleanup_lost(info: dict[str, Any], folder: Path, loop: str, run_id: str) -> str:
    """Remove the worktree a killed supervisor left; keep its branch when it
    holds commits. Returns a note for the lost record.

    `info` comes from state.json, which may be damaged: the folder removed
    is the loop's own (`folder`), never a path read from state, and only a
    branch named for this very run is ever deleted."""
    repo, branch, base_sha = info.get("repo"), info.get("branch"), info.get("base_sha")
    if not (isinstance(repo, str) and isinstance(branch, str) and isinstance(base_sha, str)
            and branch.endswith(f"/{loop}/{run_id}") and not branch.startswith("-")
            and re.fullmatch(r"[0-9a-f]{7,64}", base_sha)
            and git(repo, "rev-parse", "--git-dir", check=False).returncode == 0):
        _delete_folder(folder)
        return "worktree folder removed; its recorded repository or branch was not usable"
    try:
        count: int | None = int(git(repo, "rev-list", "--count", f"{base_sha}..{branch}").stdout)
    except (LoopctlError, ValueError):
        count = None  # cannot tell: a branch that may hold work is never deleted
    discard(repo, folder)
    if count is None:
        return f"worktree removed; branch {branch} kept (its commits could not be counted)"
    if count:
        return f"worktree removed; branch {branch} kept ({count} commit(s))"
    git(repo, "branch", "--quiet", "-D", branch, check=False)
    return "worktree removed; no commits, branch deleted"


RUN_ID = r"[0-9]{8}T[0-9]{6}Z-[0-9]{4,}"   # lifecycle.run_id_for


def loop_branches(repo: str, prefix: str, loop: str) -> list[str]:
    """This loop's run branches: exactly `<prefix><loop>/<run-id>`, never a
    branch of another loop whose prefix or name overlaps (`<prefix><loop>-b/`,
    `<prefix><loop>/x/...`)."""
    proc = git(repo, "for-each-ref", "--format=%(refname:short)",
               f"refs/heads/{prefix}{loop}/", check=False)
    shape = re.compile(re.escape(f"{prefix}{loop}/") + RUN_ID)
    return [b for b in proc.stdout.split() if shape.fullmatch(b)]


def unpushed(repo: str, branch: str) -> bool:
    """Commits on `branch` that no remote-tracking ref holds."""
    proc = git(repo, "rev-list", "--count", f"refs/heads/{branch}", "--not", "--remotes",
               check=False)
    return proc.returncode == 0 and proc.stdout.strip() not in ("", "0")
