"""A run's git worktree (DESIGN §12, §15): each run of a `--worktree` loop
works in a git worktree of its own, on branch `<prefix><loop>/<run-id>` cut
from the base. The user's checkout is never touched: every git command here
runs against the worktree (named by loopctl's record of it, never by its
`.git` link) or the repository's refs, never its working files.

Here `start` checks that the base and the remote a run needs exist
(`check_handoff_targets`), the worktree is made (`prepare`) and removed
(`remove`, `discard`, `cleanup_lost` after a lost run), and a loop's run
branches are found for doctor and `rm`. What a run leaves is committed and handed off by
integrations/delivery.py, which this module never imports: removing a lost
run's worktree loads no GitHub client.

Only the supervisor (and the driver cleaning up after a lost run, and `rm`)
calls this module; every git call is a real subprocess with a timeout.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from loopctl.domain.errors import LoopctlError, UsageError
from loopctl.fast.data_class import record
from loopctl.integrations.copying import copy_ignored
from loopctl.integrations.git import GitError, git, last_line


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


def repository(cwd: str, name: str = "--worktree") -> tuple[str, str | None]:
    """(top level, checked-out branch or None when detached) of `cwd`; exit 2
    when git is missing or `cwd` is not in a repository, said after `name`
    (the worktree's row's rule `git_repository`: integrations/context_rules)."""
    if shutil.which("git") is None:
        raise UsageError(f"{name} needs git, which is not on PATH")
    top = git(cwd, "rev-parse", "--show-toplevel", check=False)
    if top.returncode != 0:
        raise UsageError(f"{name}: {cwd} is not in a git repository")
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
