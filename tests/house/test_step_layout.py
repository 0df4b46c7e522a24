"""The steps of a run pass data, not imports (DESIGN §10, "Steps that pass
data"): no module under loopctl/engine/steps imports another step, at the
top or inside a function, in any spelling (`from loopctl.engine.steps import
x`, `from loopctl.engine.steps.x import y`, `import loopctl.engine.steps.x`,
or relative); what steps share lives beside the package. And the supervisor
imports the steps of a feature (gate, check, worktree, ...) only for a loop
that uses it. An AST check: cheap, and it names the line."""

from __future__ import annotations

import ast
from pathlib import Path

import loopctl.engine.steps

STEPS = Path(loopctl.engine.steps.__file__).parent
PACKAGE = "loopctl.engine.steps"
STEP_NAMES = {p.stem for p in STEPS.glob("*.py") if p.stem != "__init__"}
# Every run needs these; the others belong to a feature a loop may not use.
EVERY_RUN = {"launch", "wait", "output", "settle"}


def imported_steps(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, step) for every import of a step module anywhere in `tree`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    found.append((node.lineno, alias.name.split(".")[3]))
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # relative, from inside the package
                if module:
                    found.append((node.lineno, module.split(".")[0]))
                else:
                    found += [(node.lineno, a.name) for a in node.names]
            elif module == PACKAGE:
                found += [(node.lineno, a.name) for a in node.names]
            elif module.startswith(PACKAGE + "."):
                found.append((node.lineno, module.split(".")[3]))
    return found


def test_no_step_imports_another_step() -> None:
    assert {"launch", "wait", "settle"} <= STEP_NAMES  # the scan sees the package
    wrong = []
    for path in sorted(STEPS.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for line, step in imported_steps(tree):
            wrong.append(f"{path.name}:{line} imports the step {step}")
    assert not wrong, "a step imports a step; move what they share beside steps/:\n" \
        + "\n".join(wrong)


def test_the_scan_catches_each_spelling() -> None:
    """The check itself: each way of importing a step is seen, even inside
    a function."""
    spellings = ["from loopctl.engine.steps import gate",
                 "from loopctl.engine.steps.launch import spawn",
                 "import loopctl.engine.steps.check",
                 "from . import wait", "from .notes import hand_out",
                 "def f():\n    from loopctl.engine.steps import protect\n"]
    for code in spellings:
        assert imported_steps(ast.parse(code)), code
    assert not imported_steps(ast.parse("from loopctl.engine import run_context\n"
                                        "from loopctl.engine.steps_x import y"))


def test_the_supervisor_imports_feature_steps_only_when_used() -> None:
    """At the top of the supervisor, only the steps every run takes: a step
    for a feature is imported where the loop is found to use it."""
    import loopctl.engine.supervisor as supervisor

    tree = ast.parse(Path(supervisor.__file__).read_text())
    imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    top = {step for _, step in imported_steps(ast.Module(imports, []))}
    assert top == EVERY_RUN
