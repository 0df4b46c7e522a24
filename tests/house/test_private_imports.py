"""No module of loopctl imports a private module (`_json`, `_sha2`,
`_operator`, `_datetime`, `typer._click`, any `_x`) but those listed in
ALLOWED: the speed modules, all in `loopctl/fast/`, each held to the public
module it stands in for by a test of its own, and the one import a library
leaves no public way to (issue 52).

A private module is CPython's or a library's to change in any release; a
speed module that uses one must keep giving what the public module gives,
which only a test comparing the two can say.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import loopctl

PACKAGE = Path(loopctl.__file__).resolve().parent
TESTS = Path(__file__).resolve().parent.parent

# module: (the private modules it may import, the public modules it stands
# in for, the test file that holds it to them). A module that stands in for
# none is listed with its reason instead.
SPEED: dict[str, tuple[set[str], tuple[str, ...], str]] = {
    "loopctl.fast.digests": ({"_operator", "_sha256", "_sha2"}, ("hashlib", "hmac"),
                               "domain/test_digests.py"),
    "loopctl.fast.cfuncs": ({"_ctypes"}, ("ctypes",), "store/test_cfuncs.py"),
}
NEEDED: dict[str, tuple[set[str], str]] = {
    # Typer 0.2x vendors click as typer._click: UsageError, NoSuchOption and
    # NoArgsIsHelpError, which the one-line errors catch, are nowhere else.
    "loopctl.cli.app": ({"typer._click"}, "click's exceptions, vendored by typer"),
}
ALLOWED = {**{m: names for m, (names, _, _) in SPEED.items()},
           **{m: names for m, (names, _) in NEEDED.items()}}


def _is_private(dotted: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in dotted.split("."))


def _is_module(dotted: str) -> bool:
    """Whether `dotted` names a module (not a function of one: `os._exit`)."""
    try:
        return importlib.util.find_spec(dotted) is not None
    except (ImportError, ValueError):
        return False


def private_imports(source: str) -> set[str]:
    """The private modules `source` imports, at any depth, in any form:
    `import _x`, `from _x import y`, `from pkg import _sub`, and
    `importlib.import_module("_x")` / `__import__("_x")` with a literal."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if _is_private(a.name)}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if _is_private(node.module):
                found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")
                      and _is_module(f"{node.module}.{a.name}")}
        elif isinstance(node, ast.Call) and node.args \
                and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) \
                and ast.unparse(node.func) in ("importlib.import_module", "import_module",
                                               "__import__") \
                and _is_private(node.args[0].value):
            found.add(node.args[0].value)
    return {name for name in found if not name.startswith("loopctl.")}


def package_private_imports() -> dict[str, set[str]]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        names = private_imports(path.read_text())
        if names:
            out[module] = names
    return out


def test_only_the_listed_modules_import_a_private_module() -> None:
    found = package_private_imports()
    offences = [f"{module} imports {', '.join(sorted(names - ALLOWED.get(module, set())))}"
                for module, names in found.items() if names - ALLOWED.get(module, set())]
    assert offences == [], "a private module imported outside ALLOWED:\n" + "\n".join(offences)
    # An allowance no longer used is a hole a later import would slip through.
    stale = sorted(set(ALLOWED) - set(found))
    assert stale == [], f"listed in ALLOWED but importing no private module: {stale}"


def test_the_speed_modules_live_in_the_fast_package() -> None:
    """Only `loopctl/fast/` may import a private module for speed; outside
    it, only what no public module gives (NEEDED, each with its reason)."""
    outside = sorted(module for module in SPEED if not module.startswith("loopctl.fast."))
    assert outside == [], f"speed modules outside loopctl/fast/: {outside}"
    assert set(NEEDED) == {"loopctl.cli.app"}
    assert all(reason for _, reason in NEEDED.values())


def test_the_scan_finds_each_form_and_only_modules() -> None:
    """The measure can fail: each form of a private import is found."""
    assert private_imports("import _json") == {"_json"}
    assert private_imports("from _sha2 import sha256") == {"_sha2"}
    assert private_imports("def f():\n    from typer._click import exceptions as cx") \
        == {"typer._click"}
    assert private_imports("from typer import _click") == {"typer._click"}
    assert private_imports("import importlib\nimportlib.import_module('_datetime')") \
        == {"_datetime"}
    assert private_imports("__import__('_operator')") == {"_operator"}
    # Not private modules: the future, a function of a public module, loopctl's own.
    assert private_imports("from __future__ import annotations\nfrom os import _exit\n"
                           "import json.decoder") == set()


def test_each_speed_module_is_held_to_the_module_it_replaces() -> None:
    """Its test file imports it and every public module it stands in for
    (and compares them: see each file)."""
    for module, (_, public, test_file) in SPEED.items():
        path = TESTS / test_file
        assert path.is_file(), f"{module}: no {test_file}"
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        missing = [name for name in (module, *public) if name not in imported]
        assert missing == [], f"{test_file} does not import {missing}"
