"""Commands return records (issue 52 item 2): a command's result is a record
with named fields, which the CLI renders or prints with `to_json()`, never a
plain `dict[str, Any]`. Static: the package is read, not imported.

- No function of loopctl/commands/ returns `dict[str, Any]` (alone or in a
  union; a list of them is a listing's rows, not yet typed), but a record's
  serializers (`to_json`, `as_loop`) and the one named below with its reason.
- domain/ and engine/ return no more of them than they do now: the count
  only comes down (lower CEILING when you type one).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.house.metrics import sources

UNTYPED = "dict[str, Any]"
SERIALIZERS = {"to_json", "as_loop"}
# Function: why it still returns a mapping.
ALLOWED: dict[str, str] = {}
CEILING = {"domain": 0, "engine": 0}


def untyped_returns(module: str, path: Path) -> Iterator[str]:
    """`module.function` of each function returning `dict[str, Any]`."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns \
                and UNTYPED in _union(node.returns) and node.name not in SERIALIZERS:
            yield f"{module}.{node.name}"


def _union(annotation: ast.expr) -> list[str]:
    """The members of `A | B | None` as written (one: the annotation)."""
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return _union(annotation.left) + _union(annotation.right)
    return [ast.unparse(annotation)]


def layer_returns(layer: str) -> list[str]:
    return [found for module, path in sources().items()
            if module.startswith(f"loopctl.{layer}.") or module == f"loopctl.{layer}"
            for found in untyped_returns(module, path)]


def test_no_command_returns_a_plain_mapping() -> None:
    found = layer_returns("commands")
    offending = [name for name in found if name not in ALLOWED]
    assert not offending, ("commands return records (a frozen @record with to_json(), see "
                           f"loopctl/domain/result.py), not dict[str, Any]: {offending}")
    assert set(ALLOWED) <= set(found), "typed now: remove it from ALLOWED"


def test_the_pure_layer_and_the_engine_return_no_more_plain_mappings() -> None:
    for layer, ceiling in CEILING.items():
        found = layer_returns(layer)
        assert len(found) <= ceiling, (f"{layer}/ returns dict[str, Any] from {len(found)} "
                                       f"functions, more than {ceiling}: {found}")
        assert len(found) == ceiling, (f"{layer}/ is down to {len(found)}: lower CEILING "
                                       f"to {len(found)}")


def test_the_check_sees_a_plain_mapping(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def a() -> dict[str, Any]: ...\n"
                      "def b() -> dict[str, Any] | None: ...\n"
                      "def c() -> Mapping[str, Any]: ...\n"
                      "def to_json(self) -> dict[str, Any]: ...\n"
                      "def d() -> dict[str, int]: ...\n"
                      "def e() -> list[dict[str, Any]]: ...\n"
                      "def f() -> None | dict[str, Any] | int: ...\n")
    assert list(untyped_returns("m", module)) == ["m.a", "m.b", "m.f"]
