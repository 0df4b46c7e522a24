"""Isolated workspaces (DESIGN §12): each run of a `--worktree` loop works in
a git worktree of its own, on branch `<prefix><loop>/<run-id>` cut from the
base, and what it leaves is committed and handed off as a branch, a draft PR
or a merge. The user's checkout is never touched: every git command here
runs against the worktree or the repository's refs, never its working files.

Only the supervisor (and the driver cleaning up after a lost run) calls this
module; every git and gh call is a real subprocess with a timeout.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loopctl.domain.errors import LoopctlError, UsageError
from loopctl.domain.untrusted import plain

GIT_TIMEOUT = 120.0
LOCK_RETRIES = 6          # git's own locks (index.lock, ref locks) when loops share a repo
PUSH_ATTEMPTS = 3
NO_CHECKS_AFTER = 180.0   # a PR with no checks reported by then is "no checks": never merged
MERGE_METHODS = ("squash", "merge", "rebase")
IDENTITY = ("loopctl", "loopctl@localhost")
_LOCKED = re.compile(r"\.lock'?: File exists|cannot lock ref|Unable to create .*\.lock|"
                     r"could not lock", re.I)


class GitError(LoopctlError):
    pass


@dataclass
class Workspace:
    repo: str          # the repository's top level (the user's checkout)
    path: Path         # the worktree
    branch: str
    base: str          # what the user named (`main`)
    base_ref: str      # what the branch was cut from (`origin/main` after a fetch)
    base_sha: str
    subdir: str = ""   # where `--cwd` sits inside the repository
    note: str | None = None

    @property
    def cwd(self) -> str:
        return str(self.path / self.subdir) if self.subdir else str(self.path)

    def to_json(self) -> dict[str, Any]:
        return {"repo": self.repo, "path": str(self.path), "branch": self.branch,
                "base": self.base, "base_ref": self.base_ref, "base_sha": self.base_sha}


@dataclass
class Handoff:
    """What became of a run's work; merged into its record."""

    handoff: str = "no_change"
    fields: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None      # handoff_failed: why
    review: str | None = None       # needs_review: why

    def record(self) -> dict[str, Any]:
        out = {"handoff": self.handoff, **self.fields}
        if self.failure:
            out["handoff_error"] = self.failure
        if self.review:
            out["needs_review"] = self.review
        return out


# -- running git ---------------------------------------------------------------------


def git(repo: str | Path, *args: str, check: bool = True,
        timeout: float = GIT_TIMEOUT) -> subprocess.CompletedProcess[str]:
    """`git -C repo ARGS`, retrying while another git holds one of its locks."""
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0", LC_ALL="C")
    for attempt in range(LOCK_RETRIES):
        try:
            proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True,
                                  text=True, timeout=timeout, env=env,
                                  stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise UsageError("git is not installed; --worktree needs it") from None
        except subprocess.TimeoutExpired:
            raise GitError(f"git {args[0]} timed out after {timeout:g}s") from None
        if proc.returncode == 0 or not _LOCKED.search(proc.stderr):
            break
        time.sleep(0.2 * 2 ** attempt)
    if check and proc.returncode != 0:
        raise GitError(f"git {' '.join(args[:2])} failed: {last_line(proc)}")
    return proc


def last_line(proc: subprocess.CompletedProcess[str]) -> str:
    """git's own reason: its `fatal:`/`error:` line when there is one (the
    last line is often advice)."""
    lines = [ln.strip() for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip()]
    reasons = [ln for ln in lines if ln.startswith(("fatal:", "error:", "remote:", "!"))]
    chosen = reasons[0] if reasons else (lines[-1] if lines else f"exit {proc.returncode}")
    return plain(chosen)[:300]  # a remote's `remote:` lines are anyone's text


def check_ref(name: str, what: str) -> str:
    """A branch name git accepts and no command can mistake for an option."""
    if not name or name.startswith("-") or len(name) > 200 or subprocess.run(
            ["git", "check-ref-format", "--branch", name], capture_output=True,
            stdin=subprocess.DEVNULL).returncode != 0:
        raise UsageError(f"bad {what} {name!r}: expected a git branch name like main")
    return name


def check_prefix(prefix: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,60}/", prefix) or ".." in prefix:
        raise UsageError(f"bad --branch-prefix {prefix!r}: expected letters, digits, . _ - "
                         "and ending in /, like loopctl/")
    return prefix


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


# -- a run's worktree ------------------------------------------------------------------


def has_remote(repo: str, remote: str) -> bool:
    return git(repo, "remote", "get-url", remote, check=False).returncode == 0


def prepare(loop: Any, run_id: str, folder: Path) -> Workspace:
    """A fresh worktree at `folder` on a new branch from the base."""
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
    base_sha = git(repo, "rev-parse", "--verify", "--quiet", f"{base_ref}^{{commit}}").stdout
    branch = f"{loop.branch_prefix}{loop.name}/{run_id}"
    remove(repo, folder)
    git(repo, "worktree", "add", "--quiet", "-b", branch, str(folder), base_sha.strip())
    ws = Workspace(repo, folder, branch, base, base_ref, base_sha.strip(),
                   "" if subdir == "." else subdir, note)
    copy_ignored(repo, folder, loop.copy)
    return ws


def copy_ignored(repo: str, folder: Path, patterns: tuple[str, ...]) -> None:
    """Copy files git ignores (`.env`) that match `--copy` into the worktree:
    regular files inside the repository only, never through a symlink."""
    root = Path(repo).resolve()
    inside = folder.resolve()
    for pattern in patterns:
        for source in root.glob(pattern):
            real = source.resolve()
            if source.is_symlink() or not source.is_file() or root not in real.parents:
                continue
            target = folder / source.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            # A committed symlink on the way (`config -> /etc`) must not
            # carry the copy out of the worktree.
            parent = target.parent.resolve()
            if not (parent == inside or inside in parent.parents) or target.is_symlink():
                continue
            shutil.copy2(source, target)


def remove(repo: str, folder: Path) -> None:
    """Remove a worktree (and git's record of it); nothing if there is none."""
    git(repo, "worktree", "prune", check=False)
    if folder.exists() or folder.is_symlink():
        git(repo, "worktree", "remove", "--force", "--force", str(folder), check=False)
        if folder.is_symlink():
            folder.unlink()
        elif folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
        git(repo, "worktree", "prune", check=False)


def identity(repo: str) -> list[str]:
    """`-c user.name=... -c user.email=...` when the repository has no identity."""
    email = git(repo, "config", "user.email", check=False).stdout.strip()
    name = git(repo, "config", "user.name", check=False).stdout.strip()
    if email and name:
        return []
    return ["-c", f"user.name={name or IDENTITY[0]}", "-c", f"user.email={email or IDENTITY[1]}"]


def commit_leftovers(ws: Workspace, message: str, run_id: str) -> str | None:
    """Commit whatever the agent left uncommitted (any outcome), and keep its
    work on the run branch even if it switched branches. A note if it did."""
    git(ws.path, "add", "--all")
    if git(ws.path, "diff", "--cached", "--quiet", check=False).returncode != 0:
        # No hook runs on loopctl's commit: --no-verify skips pre-commit and
        # commit-msg only, and prepare-commit-msg (which can refuse it) or
        # post-commit would still run code over the agent's work.
        git(ws.path, *identity(ws.repo), "-c", "core.hooksPath=/dev/null", "commit",
            "--quiet", "--no-verify", "-m", message, "-m", f"Loopctl-Run: {run_id}")
    current = git(ws.path, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    if current.stdout.strip() == ws.branch:
        return None
    head = git(ws.path, "rev-parse", "HEAD").stdout.strip()
    git(ws.repo, "update-ref", f"refs/heads/{ws.branch}", head)
    where = current.stdout.strip() or "a detached HEAD"
    return f"the agent switched to {where}; its work is on {ws.branch}"


def summarize(ws: Workspace) -> dict[str, Any]:
    """Commits beyond the base on the run branch, and their diffstat."""
    head = git(ws.repo, "rev-parse", f"refs/heads/{ws.branch}").stdout.strip()
    commits = int(git(ws.path, "rev-list", "--count", f"{ws.base_sha}..{head}").stdout)
    stat = git(ws.path, "diff", "--shortstat", ws.base_sha, head).stdout
    numbers = {key: int(m.group(1)) if (m := re.search(rf"(\d+) {word}", stat)) else 0
               for key, word in (("files_changed", "file"), ("insertions", "insertion"),
                                 ("deletions", "deletion"))}
    return {"branch": ws.branch, "base": ws.base, "base_ref": ws.base_ref, "head": head,
            "commits": commits, **numbers}


def finish(ws: Workspace, loop: Any, run_id: str, message: str, pr_body: str) -> Handoff:
    """Commit, remove the worktree, then hand off. Never raises: a failed
    hand-off keeps the branch and says why."""
    result = Handoff()
    try:
        switched = commit_leftovers(ws, message, run_id)
        info = summarize(ws)
    except LoopctlError as exc:
        remove(ws.repo, ws.path)
        return Handoff("handoff_failed", {"branch": ws.branch, "base": ws.base},
                       failure=f"commit: {exc.message}")
    remove(ws.repo, ws.path)
    notes = [n for n in (ws.note, switched) if n]
    if info["commits"] == 0:
        git(ws.repo, "branch", "--quiet", "-D", ws.branch, check=False)
        result.fields = {"handoff_note": "; ".join(notes)} if notes else {}
        return result
    result.handoff, result.fields = "committed", info
    if notes:
        result.fields["handoff_note"] = "; ".join(notes)
    if loop.push:
        handoff_remote(ws, loop, result, message, pr_body)
    return result


def handoff_remote(ws: Workspace, loop: Any, result: Handoff, title: str, body: str) -> None:
    try:
        push(ws, loop.push)
        result.handoff = "pushed"
        if loop.pr:
            result.fields["pr_url"] = open_pr(ws, title, body)
            result.handoff = "pr_opened"
            if loop.merge:
                merge(ws, loop, result)
    except LoopctlError as exc:
        result.handoff, result.failure = "handoff_failed", exc.message


def push(ws: Workspace, remote: str) -> None:
    for attempt in range(PUSH_ATTEMPTS):
        proc = git(ws.repo, "push", "--quiet", remote, f"{ws.branch}:refs/heads/{ws.branch}",
                   check=False)
        if proc.returncode == 0:
            return
        if attempt + 1 < PUSH_ATTEMPTS:
            time.sleep(2 ** attempt)
    raise GitError(f"push to {remote} failed: {last_line(proc)}")


def gh(*args: str, cwd: str, timeout: float = GIT_TIMEOUT) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(["gh", *args], capture_output=True, text=True, cwd=cwd,
                              timeout=timeout, stdin=subprocess.DEVNULL,
                              env=dict(os.environ, GH_PROMPT_DISABLED="1", NO_COLOR="1"))
    except FileNotFoundError:
        raise GitError("gh (GitHub CLI) is not on PATH; install it and `gh auth login`") \
            from None
    except subprocess.TimeoutExpired:
        raise GitError(f"gh {args[0]} {args[1]} timed out") from None
    return proc


def open_pr(ws: Workspace, title: str, body: str) -> str:
    # gh (pflag) takes the next argument as the value even when it starts
    # with `-`, so a prompt opening the body cannot become a flag.
    proc = gh("pr", "create", "--draft", "--base", ws.base, "--head", ws.branch,
              "--title", title[:250], "--body", body, cwd=ws.repo)
    if proc.returncode != 0:
        raise GitError(f"gh pr create failed: {last_line(proc)}")
    urls = re.findall(r"https?://\S+", proc.stdout)
    return urls[-1] if urls else proc.stdout.strip()[:300]


def merge(ws: Workspace, loop: Any, result: Handoff) -> None:
    """Merge once every check passed; otherwise leave the PR for a person."""
    verdict = wait_for_checks(ws, loop.checks_timeout)
    if verdict is not None:
        result.handoff, result.review = "needs_review", verdict
        return
    ready = gh("pr", "ready", ws.branch, cwd=ws.repo)
    if ready.returncode != 0:
        raise GitError(f"gh pr ready failed: {last_line(ready)}")
    proc = gh("pr", "merge", ws.branch, f"--{loop.merge}", cwd=ws.repo)
    if proc.returncode != 0:
        raise GitError(f"gh pr merge failed: {last_line(proc)}")
    result.handoff, result.fields["merged"] = "merged", True


def wait_for_checks(ws: Workspace, timeout: float) -> str | None:
    """None when all checks passed; else why not (failing, pending, none)."""
    started = time.monotonic()
    while True:
        proc = gh("pr", "checks", ws.branch, "--json", "name,state,bucket", cwd=ws.repo)
        checks = _checks(proc.stdout) if proc.returncode in (0, 1, 8) else None
        elapsed = time.monotonic() - started
        if checks:
            failing = [c["name"] for c in checks if c.get("bucket") in ("fail", "cancel")]
            if failing:
                return "checks failing: " + ", ".join(str(n) for n in failing)[:300]
            if all(c.get("bucket") in ("pass", "skipping") for c in checks):
                return None
        elif elapsed >= min(NO_CHECKS_AFTER, timeout):
            return "no checks reported: not merged without them"
        if elapsed >= timeout:
            return f"checks still pending after {timeout:g}s"
        time.sleep(min(10.0, max(timeout - elapsed, 0.1)))


def _checks(text: str) -> list[dict[str, Any]]:
    import json

    try:
        data = json.loads(text or "[]")
    except ValueError:
        return []
    return [c for c in data if isinstance(c, dict)] if isinstance(data, list) else []


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
        if folder.is_symlink():
            folder.unlink()
        else:
            shutil.rmtree(folder, ignore_errors=True)
        return "worktree folder removed; its recorded repository or branch was not usable"
    try:
        count: int | None = int(git(repo, "rev-list", "--count", f"{base_sha}..{branch}").stdout)
    except (LoopctlError, ValueError):
        count = None  # cannot tell: a branch that may hold work is never deleted
    remove(repo, folder)
    if count is None:
        return f"worktree removed; branch {branch} kept (its commits could not be counted)"
    if count:
        return f"worktree removed; branch {branch} kept ({count} commit(s))"
    git(repo, "branch", "--quiet", "-D", branch, check=False)
    return "worktree removed; no commits, branch deleted"


def loop_branches(repo: str, prefix: str, loop: str) -> list[str]:
    proc = git(repo, "for-each-ref", "--format=%(refname:short)",
               f"refs/heads/{prefix}{loop}/", check=False)
    return [b for b in proc.stdout.split() if b]


def unpushed(repo: str, branch: str) -> bool:
    """Commits on `branch` that no remote-tracking ref holds."""
    proc = git(repo, "rev-list", "--count", branch, "--not", "--remotes", check=False)
    return proc.returncode == 0 and proc.stdout.strip() not in ("", "0")
