"""What the check's runner reads without being told, on a real worktree
(DESIGN §16; the rules are domain/check_reads.py):

    runner_specs(ws, check, env) -> tuple[str, ...]   raises GitError / OSError

the git pathspecs put back with `--protect` (integrations/protect.py's
`restore(..., specs=)`): the files every Python runner
reads, the modules the check's `-m` and `-p` name, the plugins the base's
ini files (`-p`) and conftest.py files (`pytest_plugins`) and the loop's
env (`PYTEST_ADDOPTS`, `PYTEST_PLUGINS`) name, and what the agent added at
the top of the folders the check imports from (its working folder, the
repository's top, the relative `PYTHONPATH` and ini `pythonpath` entries)
that shadows a module: a standard one, pytest's own, or the one `-m` runs.
Only the base is read for the ini and conftest.py files (the agent's are
put back anyway), and the folders are opened without following a symlink.
"""

from __future__ import annotations

import os
import stat
import sys
from typing import TYPE_CHECKING

from loopctl.domain import check_reads as rules
from loopctl.domain.protect import GLOB
from loopctl.integrations.git import tree_git
from loopctl.integrations.protect import EMPTY_TREE

if TYPE_CHECKING:
    from loopctl.integrations.worktree import Workspace

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SUFFIXES = (".py", ".pyc", ".pyw", ".so")
MAX_CONFTESTS = 50
MAX_NAMED = 100


def runner_specs(ws: Workspace, check: tuple[str, ...] | None,
                    env: dict[str, str | None] | None = None) -> tuple[str, ...]:
    where = ws.subdir.strip("/")
    texts = base_texts(ws, where)
    plugins = [m for path, text in texts for m in (
        rules.conftest_plugins(text) if path.endswith("conftest.py") else rules.ini_plugins(text))]
    plugins += rules.env_plugins(env or {})
    found = rules.specs(check, where, tuple(plugins))
    inis = tuple((path.rpartition("/")[0], text) for path, text in texts
                 if not path.endswith("conftest.py"))
    folders = rules.import_folders(where, env or {}, inis)
    runners = set(rules.modules(check or ())) | {(check or ("",))[0].rsplit("/", 1)[-1]}
    names = set(sys.stdlib_module_names) | rules.PYTEST_MODULES | {r.split(".")[0] for r in runners}
    paths = (*named_files(ws, check, where), *shadowing(ws, folders, names))
    return tuple(dict.fromkeys((*found, *(rules.literal(p) for p in paths))))


def named_files(ws: Workspace, check: tuple[str, ...] | None, where: str) -> list[str]:
    """The files at the base the check's words name (its script, a
    `--config-file`): the check itself. A folder it names (`pytest src`)
    is not: that is the code under test."""
    paths = rules.named_paths(check, where)[:MAX_NAMED]
    if not paths:
        return []
    listed = tree_git(ws.admin, ws.path, "ls-tree", "--full-tree", "-z", ws.base_sha, "--",
                      *(f":(top,literal){p}" for p in paths)).stdout
    return [entry.split("\t", 1)[1] for entry in listed.split("\0")
            if "\t" in entry and entry.split()[1] == "blob"]


def base_texts(ws: Workspace, where: str) -> list[tuple[str, str]]:
    """The base's ini files (in `where` and at the top) and conftest.py
    files (the first MAX_CONFTESTS), each (path, text) when at most
    MAX_INI bytes: what names the plugins and import folders pytest uses."""
    conftests = tree_git(ws.admin, ws.path, "diff-tree", "-r", "--name-only", "-z",
                         EMPTY_TREE[len(ws.base_sha)], ws.base_sha, "--",
                         ":(top,glob)**/conftest.py").stdout.split("\0")
    paths = [rules.at(folder, name) for folder in dict.fromkeys((where, ""))
             for name in rules.INI_FILES] + [p for p in conftests if p][:MAX_CONFTESTS]
    listed = tree_git(ws.admin, ws.path, "ls-tree", "--full-tree", "-l", "-z", ws.base_sha,
                      "--", *paths).stdout
    found = []
    for entry in (e for e in listed.split("\0") if "\t" in e):
        meta, path = entry.split("\t", 1)
        fields = meta.split()
        if len(fields) < 4 or fields[1] != "blob" or not fields[3].isdigit() \
                or int(fields[3]) > rules.MAX_INI:
            continue
        text = tree_git(ws.admin, ws.path, "cat-file", "blob", fields[2], check=False).stdout
        found.append((path, text))
    return found


def shadowing(ws: Workspace, folders: list[str], names: set[str]) -> list[str]:
    """What the agent added at the top of the folders Python imports from
    that it would import as one of `names`: a module file (source,
    bytecode, extension) or a package (a folder with an `__init__`)."""
    found = []
    for folder in folders:
        tracked = set(tree_git(ws.admin, ws.path, "ls-tree", "--full-tree", "-z",
                               "--name-only", ws.base_sha, *([f"{folder}/"] if folder else [])
                               ).stdout.split("\0"))
        for entry in _entries(ws, folder):  # no glob in a name: it means itself
            path = rules.at(folder, entry)
            if path not in tracked and _module_of(ws, path, entry) in names:
                found.append(path)
    return found


def _entries(ws: Workspace, folder: str) -> list[str]:
    fd = _open_folder(ws, folder)
    if fd is None:
        return []
    try:
        return [name for name in os.listdir(fd) if not GLOB & set(name)]
    finally:
        os.close(fd)


def _open_folder(ws: Workspace, folder: str) -> int | None:
    fd = os.open(ws.path, _DIR_FLAGS)
    for part in (p for p in folder.split("/") if p):
        try:
            inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None  # gone, or reached through a symlink: nothing imports from there
        os.close(fd)
        fd = inner
    return fd


def _module_of(ws: Workspace, path: str, entry: str) -> str | None:
    """The module name `entry` is imported as, or None."""
    try:
        info = os.lstat(ws.path / path)
    except OSError:
        return None
    if stat.S_ISLNK(info.st_mode) and "." not in entry:
        return entry  # a link to a folder: Python follows it to a package
    if stat.S_ISDIR(info.st_mode):
        try:
            inside = os.listdir(ws.path / path)
        except OSError:
            return None
        return entry if any(n.startswith("__init__.") for n in inside) else None
    name, _, rest = entry.partition(".")
    return name if rest and f".{rest}".endswith(_SUFFIXES) else None
