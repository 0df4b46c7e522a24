"""The repository a confined run may read (DESIGN §14), found once and kept.

Between runs the agent's working folder is the agent's: a `.git` file it
wrote there (`gitdir: /`, or `gitdir: g` beside a `g/commondir` naming any
folder, or a FIFO) must not decide what the next run, its check or its gate
may read. So the repository is looked up when loopctl first learns of the
loop (`start`; for a loop written into loops.yaml by hand, its first
confined run) and kept in state.json; every later run reads that record.
A worktree run's repository is loopctl's record of the worktree it made.

Looked up with `safe_open`: no link followed, no FIFO opened blocking, a
few KiB read at most. A repository that is the home or holds it (a home
kept in git) is never recorded.
"""

from __future__ import annotations

import os
import posixpath
from typing import Any

from loopctl.domain.confinement import holds_home
from loopctl.storage import safe_open

LINK_BYTES = 4096
MAX_DEPTH = 64


def find(cwd: str, home: str) -> tuple[str, ...]:
    """The repository holding `cwd`: its top level, and for a linked
    worktree (`.git` is a file) its git dir and the common one. Raises
    `safe_open.Refused` for a `.git` that is a link, a FIFO or a device,
    or whose link names the root or the home."""
    folder = os.path.realpath(cwd)
    for _ in range(MAX_DEPTH):
        found = _at(folder, home)
        if found is not None:
            return () if holds_home(found[0], home) else found
        parent = posixpath.dirname(folder)
        if parent == folder:
            return ()
        folder = parent
    return ()


def _at(folder: str, home: str) -> tuple[str, ...] | None:
    """What `folder/.git` says, None if there is none."""
    dot_git = posixpath.join(folder, ".git")
    fd = safe_open.open_rule(dot_git)
    if fd is None:
        return None
    try:
        is_dir = os.path.isdir(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)
    if is_dir:
        return (folder,)
    git_dir = _link(dot_git, folder, "gitdir: ")
    if git_dir is None:
        return (folder,)
    common = _link(posixpath.join(git_dir, "commondir"), git_dir, "")
    found = (folder, git_dir) if common is None else (folder, git_dir, common)
    for path in found[1:]:
        if holds_home(path, home):
            raise safe_open.Refused(dot_git, f"its link names {path}, the root, the home "
                                             "or a folder holding the home")
    return found


def _link(path: str, base: str, prefix: str) -> str | None:
    """The folder a one-line git link file names, resolved from `base`."""
    data = safe_open.read_file(path, LINK_BYTES)
    if data is None:
        return None
    line = data.decode("utf-8", "replace").strip()
    if not line.startswith(prefix) or "\n" in line or "\0" in line:
        return None
    target = line[len(prefix):].strip()
    return os.path.realpath(posixpath.join(base, target)) if target else None


def of_worktree(ws: Any) -> tuple[str, ...]:
    """A worktree run's repository, from loopctl's record of the worktree
    (its admin folder is `<common>/worktrees/<id>`): never its `.git` link."""
    if not ws.admin:
        return (str(ws.path),)
    admin = os.path.realpath(ws.admin)
    return (str(ws.path), admin, posixpath.dirname(posixpath.dirname(admin)))

