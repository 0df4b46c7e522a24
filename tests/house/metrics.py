"""The house metrics, a lint step: no file of the package over 500 lines, no
function body over 60 lines, complexity at most 12 in the lint config (ruff's
C901 measures it), and no import circle between loopctl's modules at module
level. Static: the package is read, never imported or run, so the step needs
only Python's standard library and runs before anything is installed.

    python3 -m tests.house.metrics     # from the checkout's top; exit 1 on an offence

`.ci/run` runs it before the tests; `tests/house/test_house_rules.py` runs it
too (so the README's test command keeps the house) and shows each measure an
offender. CONTRIBUTING.md says why the limits are what they are.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "loopctl"  # read, never imported: the lint runs before any install
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


def long_files(limit: int = MAX_FILE_LINES) -> list[str]:
    return [f"{path.relative_to(ROOT)}: {lines} lines (at most {limit})"
            for path in sources().values()
            if (lines := len(path.read_text(encoding="utf-8").splitlines())) > limit]


def long_functions(limit: int = MAX_BODY_LINES) -> list[str]:
    return [f"{line} (at most {limit})" for path in sources().values()
            for line in long_bodies(path.read_text(encoding="utf-8"),
                                    str(path.relative_to(ROOT)), limit)]


def complexity_config() -> list[str]:
    """The ruff config keeps C901 at most 12, tests/ alone exempt (skipped
    where Python has no tomllib, before 3.11)."""
    try:
        import tomllib
    except ImportError:
        return []
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    lint = config["tool"]["ruff"]["lint"]
    found = []
    if "C901" not in lint["select"] or lint["mccabe"]["max-complexity"] > MAX_COMPLEXITY:
        found.append("pyproject.toml: ruff must select C901 with max-complexity <= "
                     f"{MAX_COMPLEXITY}")
    ignored = sorted(path for path, rules in lint.get("per-file-ignores", {}).items()
                     if "C901" in rules and not path.startswith("tests/"))
    found += [f"pyproject.toml: {path} may not ignore C901" for path in ignored]
    return found


def import_circles() -> list[str]:
    graph = import_graph()
    assert sum(len(edges) for edges in graph.values()) > 100  # the graph was read
    return ["import circle: " + " -> ".join(group) for group in circles(graph)]


def problems() -> list[str]:
    """Every offence, one line each."""
    return long_files() + long_functions() + complexity_config() + import_circles()


def main() -> int:
    found = problems()
    for line in found:
        print(line)
    print(f"house metrics: {len(sources())} modules, {len(found)} offence(s)",
          file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
