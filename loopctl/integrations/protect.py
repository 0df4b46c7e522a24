"""Putting protected paths back (DESIGN §16), with the safe git runner of
integrations/git.py: every command names the worktree's git directory and
work tree itself, with every filter, diff and merge driver switched off.

    restore(ws, patterns, copy) -> Restored      raises GitError / OSError

What the agent changed under the protected paths, compared with the run's
base commit (`ws.base_sha`: the branch's base, or the PR head a continuing
run started from), is put back: files it edited, deleted or replaced (by a
symlink, a folder) are written again from the base, files it added are
removed, ignored ones included (a planted `__pycache__` or `.pyc` is code
the check would run). A symlink in the base comes back as that symlink;
nothing the agent left is followed: git itself replaces a symlinked folder
in the way, and what loopctl removes it removes through folders it opened
without following a link.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from loopctl.domain.protect import pathspecs
from loopctl.fast.data_class import factory, record
from loopctl.integrations.git import GitError, drivers_off, last_line, run, tree_git

if TYPE_CHECKING:
    from loopctl.integrations.worktree import Workspace

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@record
class Restored:
    changed: list[str] = factory(list)   # what the agent changed (would have committed)
    removed: list[str] = factory(list)   # untracked files taken away, ignored ones too
    flatten: bool = False                # the agent's own commits touched protected paths


def _listed(ws: Workspace, *args: str, env: dict[str, str] | None = None) -> list[str]:
    proc = tree_git(ws.admin, ws.path, *args, env=env)
    return [p for p in proc.stdout.split("\0") if p]


def restore(ws: Workspace, patterns: tuple[str, ...], copy: tuple[str, ...] = (),
            specs: tuple[str, ...] = ()) -> Restored:
    """Put every protected path back as at the base; what was changed.

    What the agent changed is found with an index of loopctl's own, read
    from the base: the worktree's index is the agent's to write (an entry
    marked assume-unchanged or skip-worktree, or with forged stat data,
    would hide an edit from a `git diff` through it), and files hashed
    against an index without stat data are compared by content. That index
    holds only the protected entries of the base, so only they are hashed."""
    every = [*pathspecs(patterns), *specs]  # `specs`: git pathspecs, taken as they are
    drivers = drivers_off(configured_drivers(ws))
    with tempfile.TemporaryDirectory(prefix="loopctl-protect-") as scratch:
        based = {**drivers, "GIT_INDEX_FILE": os.path.join(scratch, "index")}
        _base_index(ws, every, based)
        edited = _listed(ws, "diff-files", "--name-only", "-z", "--", *every, env=based)
        added = _listed(ws, "ls-files", "-z", "--others", "--", *every, env=based)
        staged = _listed(ws, "diff", "--cached", "--name-only", "-z", "--no-renames",
                         ws.base_sha, "--", *every, env=drivers)  # the worktree's own index
        ignored = _ignored(ws, added)
        done = Restored(sorted(set(edited) | set(staged) | {p for p in added if p not in ignored}),
                        added, _flatten(ws, every))
        for relative in sorted(added, reverse=True):  # inner paths first
            remove_under(ws.path, relative.rstrip("/"))
        if edited:
            tree_git(ws.admin, ws.path, "checkout-index", "-f", "-z", "--stdin", env=based,
                     stdin="\0".join(edited) + "\0")
        if edited or staged:
            _reset_index(ws, sorted(set(edited) | set(staged)), based, drivers)
    if added and copy:  # an ignored --copy file under a protected path comes back
        from loopctl.integrations.copying import copy_ignored

        copy_ignored(ws.repo, ws.path, copy)
    return done


# The empty tree, by the length of the repository's object names (SHA-1, SHA-256).
EMPTY_TREE = {40: "4b825dc642cb6eb9a060e54bf8d69288fbee4904",
              64: "6ef19b41225c5369f1c104d45d8d85efa9b057b53b14b4b9b939dd74decc5321"}


def _base_index(ws: Workspace, specs: list[str], based: dict[str, str]) -> None:
    """loopctl's index (`based`): the base's entries under the protected
    paths (a diff from the empty tree takes pathspec globs), their stat
    data refreshed from the worktree, which hashes each once: an entry
    left without stat data is one whose file differs."""
    raw = tree_git(ws.admin, ws.path, "diff-tree", "-r", "-z", "--no-renames",
                   EMPTY_TREE[len(ws.base_sha)], ws.base_sha, "--", *specs).stdout.split("\0")
    lines = [f"{meta[1]} {meta[3]}\t{path}" for meta, path in
             ((m.split(" "), p) for m, p in zip(raw[0::2], raw[1::2], strict=False))
             if len(meta) >= 4]
    if lines:
        tree_git(ws.admin, ws.path, "update-index", "-z", "--index-info", env=based,
                 stdin="\0".join(lines) + "\0")
        # Exit 1 when an entry needs updating: that is a file the agent changed.
        tree_git(ws.admin, ws.path, "update-index", "-q", "--refresh", env=based, check=False)


def _flatten(ws: Workspace, specs: list[str]) -> bool:
    """Did the agent's own commits touch a protected path?"""
    proc = tree_git(ws.admin, ws.path, "rev-list", "--count", f"{ws.base_sha}..HEAD", "--",
                    *specs, check=False)
    return proc.stdout.strip() not in ("", "0")


def _reset_index(ws: Workspace, paths: list[str], based: dict[str, str],
                 drivers: dict[str, str]) -> None:
    """The worktree's index entries of `paths` as at the base (flags the
    agent set on them cleared), or removed where the base has none, so the
    commit takes nothing protected from it."""
    literal = [f":(top,literal){p}" for p in paths]
    entries = tree_git(ws.admin, ws.path, "ls-files", "-s", "-z", "--", *literal,
                       env=based).stdout
    known = {entry.split("\t", 1)[1] for entry in entries.split("\0") if "\t" in entry}
    gone = "0" * len(ws.base_sha)
    lines = [e for e in entries.split("\0") if e] + [f"0 {gone}\t{p}" for p in paths
                                                     if p not in known]
    # From the work tree's top: `--index-info` sets no work tree up, and git
    # then checks the entries it keeps for being racily clean (a same-size
    # edit within the second the index was written) relative to where it
    # runs; from elsewhere that check finds no file, and such an edit of an
    # unprotected file would look committed already.
    run(["-C", str(ws.path), "--git-dir", ws.admin, "--work-tree", str(ws.path),
         "update-index", "-z", "--index-info"], stdin="\0".join(lines) + "\0",
        env=drivers, what="update-index")


def _ignored(ws: Workspace, paths: list[str]) -> set[str]:
    """Of the untracked paths, those git ignores (a cache the check or the
    agent's own test run made: removed, but not a change the agent made)."""
    if not paths:
        return set()
    proc = tree_git(ws.admin, ws.path, "check-ignore", "-z", "--stdin", check=False,
                    stdin="\0".join(p.rstrip("/") for p in paths) + "\0")
    if proc.returncode not in (0, 1):
        raise GitError(f"git check-ignore failed: {last_line(proc)}")
    found = {p for p in proc.stdout.split("\0") if p}
    return {p for p in paths if p.rstrip("/") in found}


def configured_drivers(ws: Workspace) -> set[tuple[str, str]]:
    """Every filter, diff and merge driver git's configuration defines (the
    agent may have written the repository's): all of them switched off,
    whatever the attributes name, so git runs none of them here. One git
    call, whatever the number of paths."""
    proc = tree_git(ws.admin, ws.path, "config", "-z", "--get-regexp",
                    r"^(filter|diff|merge)\..*\.", check=False)
    found = set()
    for entry in proc.stdout.split("\0"):
        key = entry.split("\n", 1)[0]
        section, _, rest = key.partition(".")
        name = rest.rpartition(".")[0]
        if section in ("filter", "diff", "merge") and name:
            found.add((section, name))
    return found


def remove_under(root: Path, relative: str) -> None:
    """Remove `root/relative` (a file, a symlink, a folder) and the folders
    above it left empty, opening each folder on the way without following a
    symlink: a path that leads through one is not in the worktree any more,
    so nothing is removed there."""
    parts = [p for p in relative.split("/") if p]
    if not parts:
        return
    fds = [os.open(root, _DIR_FLAGS)]
    try:
        for part in parts[:-1]:
            try:
                fds.append(os.open(part, _DIR_FLAGS, dir_fd=fds[-1]))
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                    return  # gone already, or reached through a symlink
                raise
        _remove_entry(fds[-1], parts[-1])
        for depth in range(len(parts) - 1, 0, -1):  # folders the removal emptied
            try:
                os.rmdir(parts[depth - 1], dir_fd=fds[depth - 1])
            except OSError:
                break  # not empty (or not ours to remove): so are those above
    finally:
        for fd in fds:
            os.close(fd)


def _remove_entry(dir_fd: int, name: str) -> None:
    try:
        info = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):  # a nested repository, listed as one entry
        try:
            _remove_tree(dir_fd, name)
        except RecursionError:
            raise OSError(f"{name}: folders nested too deep to remove") from None
    else:
        os.unlink(name, dir_fd=dir_fd)


def _remove_tree(parent_fd: int, name: str) -> None:
    """A folder and all in it, relative to an open folder, never following
    a symlink (shutil.rmtree takes no dir_fd before Python 3.11)."""
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    try:
        for entry in os.scandir(fd):
            if entry.is_dir(follow_symlinks=False):
                _remove_tree(fd, entry.name)
            else:
                os.unlink(entry.name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)


def unmatched(repo: str, base: str, patterns: tuple[str, ...]) -> list[str]:
    """`start`/`update`: the patterns that match no file on the base (a
    diff from the empty tree takes pathspec globs; ls-tree does not)."""
    from loopctl.domain.protect import pathspec
    from loopctl.integrations.git import git, run

    empty = run(["-C", repo, "hash-object", "-t", "tree", "--stdin"], stdin="",
                what="hash-object").stdout.strip()
    found = []
    for pattern in patterns:
        proc = git(repo, "diff-tree", "-r", "--name-only", "-z", empty, f"{base}^{{commit}}",
                   "--", pathspec(pattern), check=False)
        if proc.returncode == 0 and not proc.stdout.strip("\0"):
            found.append(pattern)
    return found
