"""The house's guides (README "Development"), measured over the package: no
file over 500 lines, no function body over 60 lines, complexity at most 12
in the lint config, and no import circle between loopctl's modules at
module level. Static: nothing is imported or run."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import loopctl

PACKAGE = Path(loopctl.__file__).parent
MAX_FILE_LINES = 500
MAX_BODY_LINES = 60
MAX_COMPLEXITY = 12


def sources() -> dict[str, Path]:
    """Every module of the package by dotted name."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    assert len(found) > 50  # the walk found the package
    return found


def long_bodies(source: str, filename: str, limit: int) -> list[str]:
    """Functions whose body (docstring included) runs over `limit` lines."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = (node.end_lineno or node.lineno) - node.body[0].lineno + 1
            if body > limit:
                found.append(f"{filename}:{node.lineno} {node.name}: {body} lines")
    return found


def module_imports(source: str, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The loopctl modules `module` imports when it is loaded: top-level
    statements only (a function's import runs later; TYPE_CHECKING never)."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in _loaded_at_import(ast.parse(source).body):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name in known and name != module}


def _loaded_at_import(body: list[ast.stmt]) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for node in body:
        if isinstance(node, ast.If):
            if "TYPE_CHECKING" in ast.unparse(node.test):
                out.extend(_loaded_at_import(node.orelse))
                continue
            out.extend(_loaded_at_import(node.body + node.orelse))
        elif isinstance(node, ast.Try):
            out.extend(_loaded_at_import(node.body + node.orelse + node.finalbody))
            for handler in node.handlers:
                out.extend(_loaded_at_import(handler.body))
        elif isinstance(node, (ast.With, ast.For, ast.While)):
            out.extend(_loaded_at_import(node.body))
        else:
            out.append(node)
    return out


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def import_graph() -> dict[str, set[str]]:
    modules = sources()
    return {name: module_imports(path.read_text(encoding="utf-8"), name,
                                 path.name == "__init__.py", set(modules))
            for name, path in modules.items()}


def test_no_file_is_over_500_lines() -> None:
    long = {str(path.relative_to(PACKAGE.parent)): lines
            for path in sources().values()
            if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES}
    assert long == {}


def test_no_function_body_is_over_60_lines() -> None:
    found = [line for path in sources().values()
             for line in long_bodies(path.read_text(encoding="utf-8"),
                                     str(path.relative_to(PACKAGE.parent)), MAX_BODY_LINES)]
    assert found == [], "\n".join(found)


def test_the_lint_config_keeps_complexity_at_12() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 and later
    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))
    lint = config["tool"]["ruff"]["lint"]
    assert "C901" in lint["select"]
    assert lint["mccabe"]["max-complexity"] <= MAX_COMPLEXITY
    ignored = {path for path, rules in lint.get("per-file-ignores", {}).items()
               if "C901" in rules}
    assert all(path.startswith("tests/") for path in ignored), ignored


def test_no_import_circle_between_loopctl_modules() -> None:
    graph = import_graph()
    assert sum(len(edges) for edges in graph.values()) > 100  # the graph was read
    assert circles(graph) == []


def test_the_measures_see_what_they_guard() -> None:
    """Each measure, shown an offender, names it."""
    body = "def f():\n" + "    x = 1\n" * 61
    assert long_bodies(body, "probe.py", MAX_BODY_LINES) == ["probe.py:1 f: 61 lines"]
    assert long_bodies("def f():\n" + "    x = 1\n" * 60, "probe.py", MAX_BODY_LINES) == []
    known = {"loopctl.a", "loopctl.b", "loopctl.pkg", "loopctl.pkg.c"}
    a = module_imports("from loopctl import b\n", "loopctl.a", False, known)
    b = module_imports("def later():\n    import loopctl.a\n"
                       "if TYPE_CHECKING:\n    from loopctl.a import X\n"
                       "from .pkg import c\n", "loopctl.b", False, known)
    c = module_imports("from .. import a\n", "loopctl.pkg.c", False, known)
    assert (a, b, c) == ({"loopctl.b"}, {"loopctl.pkg", "loopctl.pkg.c"}, {"loopctl.a"})
    assert circles({"x": {"y"}, "y": {"z"}, "z": {"x"}, "w": {"x"}}) == [["x", "y", "z"]]
    assert circles({"x": {"y"}, "y": set()}) == []
