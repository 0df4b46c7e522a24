"""The test repositories of the workspace tests: a checkout with one commit
pushed to a local bare `origin`, copied from one built once per process."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

OWNER = ("Repo Owner", "owner@example.com")


def git(cwd: Path | str, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env=dict(os.environ, LC_ALL="C"))
    assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    return proc.stdout


@dataclass
class Repo:
    path: Path      # the user's checkout
    remote: Path    # a bare repository, the checkout's `origin`

    def git(self, *args: str) -> str:
        return git(self.path, *args)

    def sha(self, ref: str) -> str:
        return self.git("rev-parse", "--verify", f"{ref}^{{commit}}").strip()

    def branches(self, pattern: str = "loopctl/*") -> list[str]:
        return self.git("branch", "--list", "--format=%(refname:short)", pattern).split()

    def worktrees(self) -> list[str]:
        return [line.split(" ", 1)[1] for line in
                self.git("worktree", "list", "--porcelain").splitlines()
                if line.startswith("worktree ")]

    def remote_sha(self, branch: str) -> str | None:
        out = git(self.remote, "for-each-ref", "--format=%(objectname)", f"refs/heads/{branch}")
        return out.strip() or None


def make_repo(root: Path, name: str = "repo", identity: bool = True) -> Repo:
    """A checkout `root/name` with one commit, pushed to its bare `origin`
    `root/name-remote.git`: a copy of one built once per process (building
    takes nine git commands, ~80 ms of CPU; copying ~15 ms)."""
    template = _REPO_TEMPLATES.get((name, identity))
    if template is None:
        template = Path(tempfile.mkdtemp(prefix="loopctl-test-repo-"))
        atexit.register(shutil.rmtree, template, True)
        _build_repo(template, name, identity)
        _REPO_TEMPLATES[(name, identity)] = template
    for part in (name, f"{name}-remote.git"):
        shutil.copytree(template / part, root / part, symlinks=True)
    config = root / name / ".git" / "config"
    # The one absolute path in the copies: the checkout's origin.
    config.write_text(config.read_text().replace(str(template / f"{name}-remote.git"),
                                                 str(root / f"{name}-remote.git")))
    # The index's stat data names the template's files: refreshed now, as a
    # fresh clone's would be, so no later git command rewrites the index.
    git(root / name, "update-index", "-q", "--refresh")
    return Repo(root / name, root / f"{name}-remote.git")


_REPO_TEMPLATES: dict[tuple[str, bool], Path] = {}


def _build_repo(root: Path, name: str, identity: bool) -> None:
    remote = root / f"{name}-remote.git"
    git(root, "init", "-q", "--bare", "-b", "main", str(remote))
    path = root / name
    git(root, "init", "-q", "-b", "main", str(path))
    setup_identity = ["-c", "user.name=Setup", "-c", "user.email=setup@example.com"]
    if identity:
        git(path, "config", "user.name", OWNER[0])
        git(path, "config", "user.email", OWNER[1])
        setup_identity = []
    (path / "README.md").write_text("hello\nworld\n")
    (path / ".gitignore").write_text(".env\n")
    git(path, "add", "README.md", ".gitignore")
    git(path, *setup_identity, "commit", "-q", "-m", "initial")
    git(path, "remote", "add", "origin", str(remote))
    git(path, "push", "-q", "-u", "origin", "main")
