"""What a check's runner reads without being told (DESIGN §16): put back
with the protected paths, so no file outside them turns a red check green.

A check names its tests, but its runner reads more: pytest imports every
`conftest.py` on the way to them and the plugins `-p` names (in its
arguments or in an ini file's `addopts`), reads `pytest.ini`, `tox.ini`,
`setup.cfg`, `pyproject.toml` (its `addopts`, `pythonpath`, plugins),
the modules a conftest.py's `pytest_plugins` names,
Python runs every `*.pth` and `sitecustomize.py` of a site folder at start
(a venv in the worktree), loads `pytest11` entry points, and `python -m X`
imports a top-level `X.py` of the working directory before the real one;
`make` reads its Makefile, `npm test` its package.json. With `--protect`
these are put back at the run's base commit like the protected paths (what
the agent added there is removed; what it changed is listed in the
record's `protected`).

The rules here are pure: the git pathspecs for a check and the folder it
runs in, and the plugins and import folders the base's files name. What
the agent added at the top of the folders the check imports from,
shadowing a module, is found in integrations/check_reads.py.
"""

from __future__ import annotations

import posixpath
import re

# Read by Python or pytest wherever they lie in the repository: every level,
# ignored files included (a venv the agent made or --copy brought; pytest's
# cache, which `--lf` and `--sw` read to choose what to run). The
# `__pycache__` entries next to them are bytecode Python may run instead of
# the source (an `unchecked-hash` .pyc is never compared with it).
IMPLICIT = ("**/conftest.py", "**/__pycache__/conftest.*", "**/pytest.ini", "**/.pytest.ini",
            "**/tox.ini", "**/setup.cfg", "**/pyproject.toml", "**/*.pth",
            "**/sitecustomize.py", "**/__pycache__/sitecustomize.*", "**/usercustomize.py",
            "**/__pycache__/usercustomize.*", "**/entry_points.txt", "**/.pdbrc",
            "**/.coveragerc", "**/.pytest_cache/**")

# What other runners read, by the program's name, in the folder they run in.
RUNNER_FILES = {
    "make": ("Makefile", "makefile", "GNUmakefile"),
    "npm": ("package.json", ".npmrc"), "pnpm": ("package.json", ".npmrc"),
    "yarn": ("package.json", ".npmrc", ".yarnrc", ".yarnrc.yml"),
    "nox": ("noxfile.py",), "tox": ("tox.ini",),
    "just": ("justfile", ".justfile", "Justfile"),
}

# pytest and what it imports before the first conftest: a top-level module
# of the same name the agent adds where the check imports from shadows it.
PYTEST_MODULES = frozenset({"pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging",
                            "exceptiongroup", "tomli", "colorama", "pygments"})

# The ini files pytest reads `addopts` from.
INI_FILES = ("pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml")
MAX_INI = 1 << 20
GLOB = frozenset("*?[")
_PLUGINS_AT = re.compile(r"^[ \t]*pytest_plugins[ \t]*(?::[^=\n]*)?\+?=[ \t]*", re.MULTILINE)
_STRING = re.compile(r"""["']([\w.]+)["']""")
MAX_VALUE = 1 << 16
MAX_ASSIGNMENTS = 100
_PYTHONPATH = re.compile(r"^[ \t]*pythonpath[ \t]*=(.*)$", re.MULTILINE)
_WORD = re.compile(r"[\w./-]+")
MAX_FOLDERS = 10
_PLUGIN = re.compile(r"(?<![\w-])-p[\s\"',=]*([\w.:]+)")


def specs(check: tuple[str, ...] | None, where: str,
          plugins: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The git pathspecs of everything to put back for a check run in
    `where` (the folder relative to the top, "" for the top): IMPLICIT,
    the runner's own files, the module `-m` runs and the plugins `-p` (or
    the base's files, `plugins`) load, each looked up in `where` and at
    the top."""
    found = [glob("", pattern) for pattern in IMPLICIT]
    if check:
        program = check[0].rsplit("/", 1)[-1]
        found += [literal(at(where, name)) for name in RUNNER_FILES.get(program, ())]
    for module in (*modules(check or ()), *plugins):
        for folder in dict.fromkeys((where, "")):
            found += [glob(folder, tail) for tail in module_paths(module)]
    return tuple(dict.fromkeys(found))


def literal(path: str) -> str:
    """The pathspec of exactly `path` (and what is under it), from the top."""
    return f":(top,literal){path}"


def glob(folder: str, pattern: str) -> str:
    """The pathspec of `pattern` (`*` within a folder, `**` across) under
    `folder`, whose own name is matched literally whatever it holds."""
    escaped = re.sub(r"([*?\[\]\\])", r"\\\1", folder)
    return f":(top,glob){at(escaped, pattern)}"


def named_paths(check: tuple[str, ...] | None, where: str) -> list[str]:
    """The paths the check's words name, relative to the top (`ci/check.sh`
    in `sh ci/check.sh`, `ci/pytest.ini` in `--config-file=ci/pytest.ini`):
    those that are files at the base are the check itself. Never one
    outside the repository, absolute or with a glob character."""
    found = []
    for word in check or ():
        value = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
        path = None if value.startswith("-") else inside(where, value)
        if path:
            found.append(path)
    return list(dict.fromkeys(found))


def modules(argv: tuple[str, ...] | list[str]) -> list[str]:
    """The modules `-m X` runs and `-p X` / `-pX` loads (not `-p no:X`)."""
    found = []
    for i, arg in enumerate(argv):
        if arg in ("-m", "-p") and i + 1 < len(argv):
            name = argv[i + 1]
        elif arg.startswith(("-m", "-p")) and len(arg) > 2 and not arg.startswith("--"):
            name = arg[2:].lstrip("=")
        else:
            continue
        if not name.startswith("no:") and is_module_name(name):
            found.append(name)
    return found


def is_module_name(name: str) -> bool:
    return 0 < len(name) <= 200 and all(p.isidentifier() for p in name.split("."))


def module_paths(name: str) -> list[str]:
    """Where Python finds module `name`, as globs relative to a folder on
    its path: the `__init__` of each package on the way, and the module as
    a file, bytecode, an extension or a package (its `__init__` and
    `__main__`)."""
    parts = name.split(".")
    found = []
    for depth in range(1, len(parts) + 1):
        package = "/".join(parts[:depth])
        found += [f"{package}/__init__.*", f"{package}/__main__.*",
                  f"{package}/__pycache__/__init__.*", f"{package}/__pycache__/__main__.*"]
    stem = "/".join(parts)
    parent, _, leaf = stem.rpartition("/")
    cache = f"{parent}/__pycache__" if parent else "__pycache__"
    return [*found, f"{stem}.py*", f"{stem}.*so", f"{cache}/{leaf}.*"]


def at(where: str, relative: str) -> str:
    return f"{where}/{relative}" if where else relative


def ini_plugins(text: str) -> list[str]:
    """Every `-p NAME` an ini file holds, wherever it stands (`addopts` as
    a string or a TOML list, a comment): more than pytest loads, never
    less, whatever its parser makes of the file."""
    return [m for m in _PLUGIN.findall(text[:MAX_INI]) if is_module_name(m)]


def inside(where: str, relative: str) -> str | None:
    """`relative` (from `where`) as a path from the top ("" for the top);
    None when it leaves the repository, is absolute or holds a glob."""
    if not relative or relative.startswith(("/", "~")) or GLOB & set(relative) \
            or len(relative) > 1024:
        return None
    path = posixpath.normpath(at(where, relative))
    if path == ".." or path.startswith("../"):
        return None
    return "" if path == "." else path


def import_folders(where: str, env: dict[str, str | None],
                   ini_texts: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """The folders Python or pytest imports from, in the repository: where
    the check runs (`python -m` puts it first), the top, the relative
    entries of the loop's `PYTHONPATH` (from where the check runs) and of
    `pythonpath` in the base's ini files (from each file's folder,
    `ini_texts` being (folder, text) pairs)."""
    found: list[str | None] = [where, ""]
    found += [inside(where, e) for e in (env.get("PYTHONPATH") or "").split(":")]
    for folder, text in ini_texts:
        for value in _PYTHONPATH.findall(text[:MAX_INI]):
            found += [inside(folder, w) for w in _WORD.findall(value)]
    return [f for f in dict.fromkeys(found) if f is not None][:MAX_FOLDERS]


def env_plugins(env: dict[str, str | None]) -> list[str]:
    """The plugins the loop's env loads: `-p` in `PYTEST_ADDOPTS`, the
    modules `PYTEST_PLUGINS` lists (comma-separated)."""
    named = (env.get("PYTEST_PLUGINS") or "").split(",")
    return ini_plugins(env.get("PYTEST_ADDOPTS") or "") + \
        [n.strip() for n in named if is_module_name(n.strip())]


def conftest_plugins(text: str) -> list[str]:
    """The modules a conftest.py's `pytest_plugins` names: the strings in
    what is assigned to it at the start of a line (a string, or a list or
    tuple up to its closing bracket). Read by pattern, in linear time, not
    by parsing: more than Python would see, never less."""
    found: list[str] = []
    for count, match in enumerate(_PLUGINS_AT.finditer(text, 0, MAX_INI)):
        if count == MAX_ASSIGNMENTS:
            break
        rest = text[match.end():match.end() + MAX_VALUE]
        close = {"[": "]", "(": ")"}.get(rest[:1])
        end = rest.find(close) if close else rest.find("\n")
        found += [m for m in _STRING.findall(rest[:end if end >= 0 else len(rest)])
                  if is_module_name(m)]
    return found
