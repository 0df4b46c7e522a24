"""What the check's runner reads without being told is protected with the
tests (DESIGN §16, issue 48 item 4): a hostile agent leaves the code broken
and, instead of touching the protected tests, plants what pytest or Python
reads on its own (a root `conftest.py` rewriting failed reports, a
`pytest.ini` loading a `-p` plugin, the user's `-p` plugin rewritten, a
top-level `pytest.py` under `python -m pytest`, a `pytest` package in the
check's folder). Real git, a real pytest check run by real `loopctl run`
processes: each check stays red and the cheat is not committed."""

from __future__ import annotations

import shlex
import sys

import pytest

from conftest import CLI
from integrations.test_workspace import Repo, last_record, repo, start  # noqa: F401

CHECK = f"{shlex.quote(sys.executable)} -m pytest -q -p no:cacheprovider -p userplug"
# The check's pytest loads only what a cheat plants or the check names (`-p`):
# the suite's own plugins (xdist, randomly, hypothesis), found through entry
# points, cost ~1.4 s of CPU per check and are no part of any cheat.
QUIET_PYTEST = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
DECIDE = f"{shlex.quote(sys.executable)} -m loopctl decide complete --summary done " \
         "--evidence 'tests pass'"
# Every failed report passes: the cheat pytest runs if it loads this file.
GREEN = ("import pytest\n"
         "@pytest.hookimpl(wrapper=True)\n"
         "def pytest_runtest_makereport(item, call):\n"
         "    report = yield\n"
         "    report.outcome = 'passed'\n"
         "    return report\n")


def with_python_tests(repo: Repo) -> str:  # noqa: F811 - not the fixture
    """The base: code that fails its pytest test, a harmless plugin of the
    user's that the check loads with `-p`, and a pyproject.toml."""
    (repo.path / "calc.py").write_text("def answer():\n    return 41\n")
    (repo.path / "userplug.py").write_text('"""The user\'s own plugin."""\n')
    (repo.path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    (repo.path / "tests").mkdir()
    (repo.path / "tests" / "test_calc.py").write_text(
        "from calc import answer\n\ndef test_answer():\n    assert answer() == 42\n")
    repo.git("add", "-A")
    repo.git("commit", "-q", "-m", "code and its test")
    return repo.sha("main")


def writes(path: str, text: str) -> str:
    return f"printf %s {shlex.quote(text)} > {path}; "


CHEATS = {
    "root conftest.py": (writes("conftest.py", GREEN), "conftest.py"),
    "pytest.ini loading a -p plugin": (
        writes("evil.py", GREEN) + writes("pytest.ini", "[pytest]\naddopts = -p evil\n"),
        "pytest.ini"),
    "the user's -p plugin rewritten": (writes("userplug.py", GREEN), "userplug.py"),
    "top-level pytest.py": (writes("pytest.py", "import os\nos._exit(0)\n"), "pytest.py"),
    "a pytest package": ("mkdir pytest; " + writes("pytest/__init__.py", "") +
                         writes("pytest/__main__.py", "raise SystemExit(0)\n"),
                         "pytest/__init__.py"),
    "setup.cfg addopts": (writes("evil.py", GREEN) +
                          writes("setup.cfg", "[tool:pytest]\naddopts = -p evil\n"), "setup.cfg"),
}


@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_a_cheat_outside_the_protected_paths_leaves_the_check_red(
        cli: CLI, repo: Repo, cheat: str) -> None:  # noqa: F811
    base = with_python_tests(repo)
    script, planted = CHEATS[cheat]
    start(cli, repo, "cheat", script + "git add -A; " + DECIDE, "--check", CHECK,
          "--protect", "tests/", "--protect", "pyproject.toml")
    proc = cli("run", "cheat", env=QUIET_PYTEST)
    assert proc.returncode == 1, proc.stderr  # the agent exited 0; its check did not pass
    record = last_record(cli, "cheat")
    assert record["check"]["exit_code"] == 1, record["check"]
    assert "assert 41 == 42" in record["check"]["output_tail"]  # the user's test ran
    assert planted in record["protected"]
    assert "complete refused: check failed (exit 1)" in record["note"]
    assert cli.json("status", "cheat")["status"] == "active"
    if record.get("handoff") == "no_change":  # nothing but the cheat: nothing committed
        assert "branch" not in record
        return
    committed = repo.git("diff", "--name-only", base, record["branch"]).split()
    assert planted not in committed and "userplug.py" not in committed


def test_a_real_fix_is_kept_and_passes(cli: CLI, repo: Repo) -> None:  # noqa: F811
    """What the agent may change (the code) still counts: the check goes
    green and the fix is committed."""
    base = with_python_tests(repo)
    start(cli, repo, "fixer", writes("calc.py", "def answer():\n    return 42\n") + DECIDE,
          "--check", CHECK, "--protect", "tests/", "--protect", "pyproject.toml")
    proc = cli("run", "fixer", env=QUIET_PYTEST)
    assert proc.returncode == 0, proc.stderr
    record = last_record(cli, "fixer")
    assert record["check"]["exit_code"] == 0 and "protected" not in record
    changed = repo.git("diff", "--name-only", base, record["branch"]).split()
    # The check's bytecode is committed with the fix where the runner writes it.
    assert [path for path in changed if "__pycache__" not in path] == ["calc.py"]
