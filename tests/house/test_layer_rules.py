"""The layer rules of DESIGN §10, for every import statement: a function's
lazy import counts as much as a module-level one (only an `if TYPE_CHECKING:`
block, which never runs, is left out). Each rule names the file and line
that breaks it:

- the pure layer (domain) imports nothing from storage, engine,
  integrations, agents, commands, cli or serve;
- storage imports nothing from engine, integrations, agents, commands, cli
  or serve;
- engine, integrations and agents import nothing from commands, cli or serve;
  commands nothing from cli or serve;
- the speed pieces (fast) sit below them all: they import nothing of loopctl
  but their own package, and every layer may import them;
- only the engine and integrations spawn processes;
- only storage writes loopctl's files: what another layer writes (a
  cgroup, a worktree, the repository's docs) is listed with its reason.

Static: nothing is imported or run."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.house.metrics import PACKAGE, sources

# Each layer and the layers it must not import (DESIGN §10: the arrows point
# down, from the CLI and the server through commands to engine, integrations
# and agents, then storage, then the pure layer).
TOP = {"commands", "cli", "serve"}
FORBIDDEN: dict[str, set[str]] = {
    # The bottom: every other part of loopctl, its top-level modules (clock,
    # settings, entry) included, their `layer()` being their name.
    "fast": {path.stem for path in PACKAGE.iterdir()
             if path.suffix == ".py" or (path / "__init__.py").is_file()}
            - {"fast", "__init__"},
    "domain": {"storage", "engine", "integrations", "agents", *TOP},
    "storage": {"engine", "integrations", "agents", *TOP},
    "engine": TOP,
    "integrations": TOP,
    "agents": TOP,
    "commands": {"cli", "serve"},
}

# Calls that start a process, by module: subprocess's every runner, os's
# fork / exec / spawn family, psutil's Popen, pty's and asyncio's.
SPAWNERS: dict[str, set[str] | None] = {
    "subprocess": {"run", "Popen", "call", "check_call", "check_output", "getoutput",
                   "getstatusoutput"},
    "os": None,  # judged by name: see _os_spawns
    "psutil": {"Popen"},
    "pty": {"spawn", "fork"},
    "asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
}
SPAWNING_LAYERS = ("loopctl.engine", "loopctl.integrations")
# Process launches outside those layers, as "module: reason". Empty: the
# server's "run now" launches its supervisor through loopctl.engine.firing.
SPAWN_ALLOWED: dict[str, str] = {}

# Calls that create, change or remove a file or folder: a module's function,
# or a Path's method on whatever it hangs off.
MODULE_WRITES = {
    "os": {"mkdir", "makedirs", "unlink", "remove", "rmdir", "rename", "replace", "chmod",
           "symlink", "link", "truncate", "mkfifo"},
    "shutil": {"rmtree", "move", "copy", "copy2", "copyfile", "copytree"},
    "tempfile": {"mkdtemp", "mkstemp"},
}
PATH_WRITES = {"write_text", "write_bytes", "touch", "mkdir", "unlink", "rmdir", "symlink_to",
               "hardlink_to"}
# What layers other than storage write, none of it loopctl's own files, as
# "module: reason".
WRITES_ALLOWED = {
    "loopctl.engine.reaper": "cgroup files under /sys/fs/cgroup, the run's containment",
    "loopctl.engine.containment.cgroup": "a run's cgroup under /sys/fs/cgroup: made and removed",
    "loopctl.engine.containment.privdev":
        "/proc/self uid_map and setgroups of the sandbox's namespace",
    "loopctl.engine.containment.sandbox": "the run's scratch folder in the system temp dir",
    "loopctl.engine.warm": "/dev/null, a waiting warm supervisor's stdout and stderr",
    "loopctl.integrations.apprise_plugins":
        "empty files naming Apprise's plugins to load, in a temporary folder",
    "loopctl.integrations.copying": "the user's untracked files copied into a run's worktree",
    "loopctl.integrations.protect": "the user's protected paths put back in the worktree",
    "loopctl.integrations.worktree": "a git worktree's .git link, and removing the worktree",
    "loopctl.cli.gendocs": "the repository's generated docs (a developer's command)",
}


def _outside_type_checking(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node except those in the body of an `if TYPE_CHECKING:`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def imports(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, dotted name) of each loopctl module or name that `module`
    imports anywhere, relative imports resolved."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in _outside_type_checking(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = parts[: len(parts) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return sorted((line, name) for line, name in found if name.startswith("loopctl."))


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_violations(source: str, module: str, is_package: bool, filename: str) -> list[str]:
    banned = FORBIDDEN.get(layer(module), set())
    seen: dict[tuple[int, str], str] = {}
    for line, name in imports(source, module, is_package):
        if layer(name) in banned:
            seen.setdefault((line, layer(name)), name)
    return [f"{filename}:{line}: {layer(module)} imports {name}"
            for (line, _), name in sorted(seen.items())]


def _aliases(tree: ast.AST) -> tuple[dict[str, str], dict[str, str]]:
    """Local names bound to a spawning module, and to a spawning function."""
    modules = {name: name for name in SPAWNERS}
    functions: dict[str, str] = {}
    for node in _outside_type_checking(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in SPAWNERS:
                    modules[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module in SPAWNERS and not node.level:
            for alias in node.names:
                if _spawns(node.module, alias.name):
                    functions[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return modules, functions


def _spawns(module: str, name: str) -> bool:
    names = SPAWNERS.get(module)
    if names is None:
        return name in ("fork", "forkpty", "system", "popen") \
            or name.startswith(("exec", "spawn", "posix_spawn"))
    return name in names


def spawn_calls(source: str, filename: str) -> list[str]:
    """Each call in `source` that starts a process, as `file:line: calls x`."""
    tree = ast.parse(source, filename)
    modules, functions = _aliases(tree)
    found = []
    for node in _outside_type_checking(tree):
        if not isinstance(node, ast.Call):
            continue
        func, called = node.func, None
        if isinstance(func, ast.Name) and func.id in functions:
            called = functions[func.id]
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
                and func.value.id in modules and _spawns(modules[func.value.id], func.attr):
            called = f"{modules[func.value.id]}.{func.attr}"
        if called:
            found.append(f"{filename}:{node.lineno}: calls {called}")
    return found


def _opens_for_writing(node: ast.Call) -> bool:
    func = node.func
    if isinstance(func, ast.Name) and func.id == "open":
        mode = node.args[1] if len(node.args) > 1 else next(
            (k.value for k in node.keywords if k.arg == "mode"), None)
        return isinstance(mode, ast.Constant) and any(c in str(mode.value) for c in "wax+")
    if isinstance(func, ast.Attribute) and func.attr == "open" \
            and isinstance(func.value, ast.Name) and func.value.id == "os" and len(node.args) > 1:
        flags = ast.unparse(node.args[1])
        return any(flag in flags for flag in ("O_CREAT", "O_WRONLY", "O_RDWR", "O_TRUNC"))
    return False


def write_calls(source: str, filename: str) -> list[str]:
    """Each call in `source` that creates, changes or removes a file."""
    found = []
    for node in _outside_type_checking(ast.parse(source, filename)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        owner = func.value.id if isinstance(func, ast.Attribute) \
            and isinstance(func.value, ast.Name) else ""
        name = func.attr if isinstance(func, ast.Attribute) else ""
        if _opens_for_writing(node) or name in PATH_WRITES \
                or name in MODULE_WRITES.get(owner, ()):
            found.append(f"{filename}:{node.lineno}: {ast.unparse(func)}(...)")
    return found


def _modules() -> Iterator[tuple[str, Path, str]]:
    for name, path in sources().items():
        yield name, path, path.read_text(encoding="utf-8")


def _where(path: Path) -> str:
    return str(path.relative_to(PACKAGE.parent))


@pytest.mark.parametrize("low", sorted(FORBIDDEN))
def test_no_layer_imports_a_layer_above_it(low: str) -> None:
    """Lazy imports included: a function's import is a dependency too."""
    checked = 0
    found = []
    for name, path, text in _modules():
        if layer(name) == low:
            checked += 1
            found += layer_violations(text, name, path.name == "__init__.py", _where(path))
    assert checked >= 3  # the check looked where the layer is
    assert found == [], "\n".join(found)


def test_only_the_engine_and_integrations_spawn_processes() -> None:
    found, spawning = [], set()
    for name, path, text in _modules():
        calls = spawn_calls(text, _where(path))
        if calls and name.startswith(SPAWNING_LAYERS):
            spawning.add(name)
        elif calls and name not in SPAWN_ALLOWED:
            found += calls
    assert {"loopctl.engine.firing", "loopctl.integrations.subprocess_runner"} <= spawning
    assert found == [], "\n".join(found)


def test_the_spawn_allowlist_holds_only_real_launches() -> None:
    modules = sources()
    stale = [name for name in SPAWN_ALLOWED
             if name not in modules
             or not spawn_calls(modules[name].read_text(encoding="utf-8"), name)]
    assert stale == []


def test_only_storage_writes_loopctls_files() -> None:
    """Prompt files, unsaved markers, decision folders, the shim and the
    cron line are written through storage (loopctl.storage.run_files,
    .atomic); every other write is listed with what it writes."""
    found, writers = [], set()
    for name, path, text in _modules():
        if layer(name) == "storage":
            continue
        calls = write_calls(text, _where(path))
        if calls and name in WRITES_ALLOWED:
            writers.add(name)
        else:
            found += calls
    assert found == [], "\n".join(found)
    assert writers == set(WRITES_ALLOWED)  # no stale entry


# Each way to write an import, with `{up}` for the layer above, and the name
# the check reports (from a module of `loopctl.{low}`).
IMPORT_FORMS = {
    "from loopctl.{up}.thing import x": "loopctl.{up}.thing",
    "import loopctl.{up}.thing": "loopctl.{up}.thing",
    "import loopctl.{up}.thing as other": "loopctl.{up}.thing",
    "from loopctl import {up}": "loopctl.{up}",
    "from ..{up} import thing": "loopctl.{up}",
    "from ..{up}.thing import x": "loopctl.{up}.thing",
}


def test_the_layer_check_sees_every_kind_of_import() -> None:
    """Module level, inside a function, relative, `import x.y`: each is
    caught; a TYPE_CHECKING block and a downward import are not."""
    for low, up in (("domain", "storage"), ("domain", "serve"), ("storage", "engine"),
                    ("storage", "agents"), ("engine", "cli"), ("integrations", "commands"),
                    ("agents", "serve"), ("commands", "cli")):
        module = f"loopctl.{low}.probe"
        for form, named in IMPORT_FORMS.items():
            line = form.format(up=up)
            assert layer_violations(line, module, False, "p.py") == \
                [f"p.py:1: {low} imports {named.format(up=up)}"], (low, line)
            lazy = f"def f():\n    if True:\n        {line}\n"
            assert layer_violations(lazy, module, False, "p.py")[0].startswith("p.py:3:")
    clean = ("if TYPE_CHECKING:\n    from loopctl.engine.x import Y\n"
             "from loopctl.domain.model import LoopDef\nfrom . import paths\n"
             "def f():\n    from loopctl.settings import knob\n")
    assert layer_violations(clean, "loopctl.storage.probe", False, "p.py") == []
    assert layer_violations("from loopctl.cli import app\n", "loopctl.serve.probe", False,
                            "p.py") == []
    # In a package's __init__, one dot is the package itself.
    assert layer_violations("from .engine import x\n", "loopctl.storage", True, "p.py") == []
    assert layer_violations("from ..engine import x\n", "loopctl.storage", True, "p.py") == \
        ["p.py:1: storage imports loopctl.engine"]


def test_the_spawn_check_sees_every_way_to_start_a_process() -> None:
    for line in ("subprocess.run(['x'])", "subprocess.Popen(['x'])", "os.fork()",
                 "os.execvp('x', ['x'])", "os.posix_spawn('x', ['x'], {})", "os.system('x')",
                 "os.spawnl(os.P_WAIT, 'x')", "psutil.Popen(['x'])", "pty.spawn(['x'])"):
        assert spawn_calls(f"def f():\n    {line}\n", "p.py") == \
            [f"p.py:2: calls {line.split('(')[0]}"], line
    assert spawn_calls("import subprocess as sp\nsp.check_output(['x'])\n", "p.py") == \
        ["p.py:2: calls subprocess.check_output"]
    assert spawn_calls("from os import execv as go\ngo('x', [])\n", "p.py") == \
        ["p.py:2: calls os.execv"]
    assert spawn_calls("os.kill(1, 9)\nsubprocess.DEVNULL\nos.getpid()\n"
                       "if TYPE_CHECKING:\n    subprocess.run([])\n", "p.py") == []


def test_the_write_check_sees_each_kind_of_write() -> None:
    for line in ("open(p, 'w')", "open(p, mode='ab')", "os.open(p, os.O_WRONLY | os.O_CREAT)",
                 "p.write_text('x')", "p.mkdir()", "shutil.rmtree(p)", "os.replace(a, b)",
                 "p.unlink()", "os.chmod(p, 0o700)", "tempfile.mkdtemp()"):
        assert write_calls(f"def f():\n    {line}\n", "p.py") == \
            [f"p.py:2: {line.split('(')[0]}(...)"], line
    assert write_calls("open(p)\nopen(p, 'rb')\nos.open(p, os.O_RDONLY)\n"
                       "s.replace('a', 'b')\natomic_write(p, b'')\nworkspace.remove(w)\n",
                       "p.py") == []
