"""The house metrics (tests/house/metrics.py, a lint step that .ci/run runs
before the tests) hold over the package, and each measure, shown an
offender, names it."""

from __future__ import annotations

from tests.house.metrics import (
    MAX_BODY_LINES,
    circles,
    long_bodies,
    long_files,
    module_imports,
    problems,
)


def test_the_house_metrics_lint_passes() -> None:
    """The same lint as `.ci/run`'s step, so the README's test command keeps
    the house too: no file over 500 lines, no function body over 60,
    complexity at most 12, no import circle."""
    found = problems()
    assert found == [], "\n".join(found)


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
    assert long_files(limit=400) != [] and long_files() == []
