"""`--copy`: files git ignores (`.env`) copied from the user's checkout into a
run's worktree (DESIGN §15).

Only ignored files: a tracked file would carry the user's uncommitted edit
into the run branch and, with `--push`, publish it (`start` refuses one,
`tracked`). Every folder on the way is opened relative to the one before it
without following symlinks, so a symlink committed in the base (`conf ->
/etc`) can neither lead a copy out of the worktree nor make it create a
folder there; a file where the checkout has a folder fails the copy, and the
run with it, with a reason.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from loopctl.domain.errors import LoopctlError, UsageError
from loopctl.integrations.git import git, run

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class CopyError(LoopctlError):
    pass


def matches(repo: str, patterns: tuple[str, ...]) -> list[str]:
    """Regular files inside the repository matching the globs, relative to
    it; never through a symlink, never in `.git`."""
    root = Path(repo).resolve()
    found: list[str] = []
    for pattern in patterns:
        for source in sorted(root.glob(pattern)):
            relative = source.relative_to(root)
            if relative.parts[:1] == (".git",) or source.is_symlink() \
                    or not source.is_file() or root not in source.resolve().parents:
                continue
            if source.resolve().relative_to(root) != relative:
                continue  # reached through a symlinked folder
            if str(relative) not in found:
                found.append(str(relative))
    return found


def tracked(repo: str, patterns: tuple[str, ...]) -> list[str]:
    """Of what the globs match now, the files git tracks."""
    paths = matches(repo, patterns)
    if not paths:
        return []
    proc = git(repo, "--literal-pathspecs", "ls-files", "-z", "--", *paths)
    return [p for p in proc.stdout.split("\0") if p]


def refuse_tracked(repo: str, patterns: tuple[str, ...]) -> None:
    """`start`/`update`: exit 2 when a --copy glob matches a tracked file."""
    found = tracked(repo, patterns)
    if found:
        raise UsageError(f"bad --copy: {found[0]!r} is tracked by git; --copy takes only "
                         "files git ignores (like .env): add it to .gitignore or drop it "
                         "from --copy")


def ignored(repo: str, paths: list[str]) -> list[str]:
    if not paths:
        return []
    kept = set(_check_ignore(repo, paths))
    return [p for p in paths if p in kept]


def _check_ignore(repo: str, paths: list[str]) -> list[str]:
    proc = run(["-C", repo, "check-ignore", "-z", "--stdin"], check=False,
               stdin="\0".join(paths) + "\0", what="check-ignore")
    if proc.returncode not in (0, 1):
        raise CopyError(f"--copy: git check-ignore failed: {proc.stderr.strip()[:200]}")
    return [p for p in proc.stdout.split("\0") if p]


def copy_ignored(repo: str, folder: Path, patterns: tuple[str, ...]) -> list[str]:
    """Copy what git ignores among the matches into the worktree; the paths
    copied. CopyError when one cannot be copied."""
    copied = []
    for relative in ignored(repo, matches(repo, patterns)):
        if copy_one(Path(repo).resolve() / relative, folder, relative):
            copied.append(relative)
    return copied


def copy_one(source: Path, folder: Path, relative: str) -> bool:
    """False when a symlink stands on the way or in place of the file."""
    parts = Path(relative).parts
    try:
        fd = os.open(folder, _DIR_FLAGS)
    except OSError as exc:
        raise CopyError(f"--copy {relative}: cannot open the worktree: {exc.strerror}") from None
    try:
        for part in parts[:-1]:
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            next_fd = _open_dir(fd, part, relative)
            if next_fd is None:
                return False
            os.close(fd)
            fd = next_fd
        return _write(fd, parts[-1], source, relative)
    finally:
        os.close(fd)


def _open_dir(fd: int, part: str, relative: str) -> int | None:
    try:
        if stat.S_ISLNK(os.lstat(part, dir_fd=fd).st_mode):
            return None  # a symlink: never followed, never replaced
        return os.open(part, _DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None  # became a symlink since: still never followed
        if exc.errno == errno.ENOTDIR:
            raise CopyError(f"--copy {relative}: the checkout has a file {part!r} where a "
                            "folder is needed") from None
        raise CopyError(f"--copy {relative}: {exc.strerror}") from None


def _write(fd: int, name: str, source: Path, relative: str) -> bool:
    try:
        existing = os.lstat(name, dir_fd=fd)
    except FileNotFoundError:
        existing = None
    if existing is not None and stat.S_ISLNK(existing.st_mode):
        return False
    if existing is not None and stat.S_ISDIR(existing.st_mode):
        raise CopyError(f"--copy {relative}: the checkout has a folder there")
    try:
        src = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise CopyError(f"--copy {relative}: cannot read it: {exc.strerror}") from None
    try:
        mode = stat.S_IMODE(os.fstat(src).st_mode)
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                      | os.O_CLOEXEC, mode, dir_fd=fd)
        try:
            while chunk := os.read(src, 1 << 20):
                os.write(out, chunk)
        finally:
            os.close(out)
    except OSError as exc:
        raise CopyError(f"--copy {relative}: {exc.strerror}") from None
    finally:
        os.close(src)
    return True
