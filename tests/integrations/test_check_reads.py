"""What the check's runner reads without being told (domain/check_reads.py,
integrations/check_reads.py, DESIGN §16): the patterns a check adds to the
protected paths, and what putting them back does on a real git worktree
against what a hostile agent plants: a package shadowing the standard
library or pytest, a link to one, a `.pth` in a venv it made, bytecode
beside a restored conftest.py, a plugin named in the base's pyproject.toml or its conftest.py's
`pytest_plugins`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from workspace.repos import git, make_repo

from loopctl.domain import check_reads as rules
from loopctl.integrations.check_reads import runner_specs
from loopctl.integrations.protect import restore
from loopctl.integrations.worktree import Workspace, common_dir, find_admin

PYTEST = ("python", "-m", "pytest", "-q")


def test_modules_are_what_m_runs_and_p_loads() -> None:
    argv = ("python", "-m", "pytest", "-p", "a.b", "-pc", "-p=d", "-p", "no:cacheprovider",
            "--pdb", "-p", "../x", "-p", "-x", "-m")
    assert rules.modules(argv) == ["pytest", "a.b", "c", "d"]


def test_ini_plugins_are_every_p_in_the_file_whatever_its_syntax() -> None:
    ini = "[pytest]\naddopts = -q -p evil --tb=short -pother -p no:cacheprovider --pdb\n"
    assert rules.ini_plugins(ini) == ["evil", "other"]
    toml = '[tool.pytest.ini_options]\naddopts = ["-p", "pkg.plug", "-p=x"]\n'
    assert rules.ini_plugins(toml) == ["pkg.plug", "x"]
    assert rules.ini_plugins("\xff-p ../../etc\n-p " + "a" * 300) == []


def test_env_plugins_are_what_pytest_addopts_and_pytest_plugins_load() -> None:
    env: dict[str, str | None] = {"PYTEST_ADDOPTS": "-q -p a.b", "PYTEST_PLUGINS": "c, d.e,,-x",
                                  "OTHER": "-p z"}
    assert rules.env_plugins(env) == ["a.b", "c", "d.e"]
    assert rules.env_plugins({"PYTEST_PLUGINS": None}) == []


def test_conftest_plugins_are_the_modules_pytest_plugins_names() -> None:
    assert rules.conftest_plugins('pytest_plugins = ["a.b", "c", "../x", 3]\n') == ["a.b", "c"]
    assert rules.conftest_plugins("pytest_plugins = ('d',)\npytest_plugins += ['e']\n") \
        == ["d", "e"]
    assert rules.conftest_plugins("pytest_plugins: str = 'f'\nother = 'g'\n") == ["f"]
    assert rules.conftest_plugins("def broken(:\n") == []
    # A file Python cannot compile (too deep for its parser) is read all the same.
    assert rules.conftest_plugins("x = " + "1+" * 300_000 + "1\npytest_plugins = 'h'\n") \
        == ["h"]


def test_import_folders_are_where_python_and_pytest_import_from() -> None:
    env: dict[str, str | None] = {"PYTHONPATH": "src:/abs:../out:lib/../vendor::*"}
    ini = ("pkg", '[tool.pytest.ini_options]\npythonpath = ["src", "."]\n')
    assert rules.import_folders("sub", env, (ini, ("", "[pytest]\npythonpath = a b\n"))) \
        == ["sub", "", "sub/src", "out", "sub/vendor", "pkg/src", "pkg", "a", "b"]


def test_a_check_adds_its_runner_files_and_modules_where_it_runs_and_at_the_top() -> None:
    assert rules.specs(None, "") == tuple(f":(top,glob){p}" for p in rules.IMPLICIT)
    found = rules.specs(("make", "test"), "sub")
    assert {":(top,literal)sub/Makefile", ":(top,literal)sub/GNUmakefile",
            ":(top,glob)**/conftest.py", ":(top,glob)**/*.pth"} <= set(found)
    found = rules.specs(PYTEST, "sub", ("pkg.plug",))
    assert {f":(top,glob){p}" for p in (
        "sub/pytest.py*", "pytest.py*", "pytest/__init__.*", "sub/pytest/__main__.*",
        "pkg/__init__.*", "pkg/plug.py*", "pkg/plug.*so", "pkg/__pycache__/plug.*",
        "sub/pkg/plug/__init__.*")} <= set(found)
    assert len(found) == len(set(found))
    # A folder's own name is literal in a glob: `a[1]` is not `a1`.
    assert ":(top,glob)a\\[1\\]\\*/pytest.py*" in rules.specs(PYTEST, "a[1]*")


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    repo = make_repo(tmp_path)
    (repo.path / "site").mkdir()  # a tracked folder named like a standard module
    (repo.path / "site" / "index.html").write_text("docs\n")
    (repo.path / "plugs").mkdir()
    (repo.path / "plugs" / "__init__.py").write_text("")
    (repo.path / "plugs" / "mine.py").write_text('"""the user\'s plugin"""\n')
    (repo.path / "pyproject.toml").write_text('[tool.pytest.ini_options]\n'
                                              'addopts = ["-p", "plugs.mine"]\n')
    (repo.path / "conftest.py").write_text("# the user's\n")
    (repo.path / "tests").mkdir()
    (repo.path / "tests" / "conftest.py").write_text('pytest_plugins = ["helpers.fixtures"]\n')
    (repo.path / "helpers").mkdir()
    (repo.path / "helpers" / "fixtures.py").write_text("# fixtures\n")
    (repo.path / "ci").mkdir()
    (repo.path / "ci" / "check.sh").write_text("exec pytest -c ci/pytest.ini\n")
    (repo.path / "ci" / "pytest.ini").write_text("[pytest]\n")
    (repo.path / ".gitignore").write_text(".venv/\n__pycache__/\n")
    repo.git("add", "-A")
    repo.git("commit", "-q", "-m", "base")
    folder = tmp_path / "wt"
    git(repo.path, "worktree", "add", "-q", "-b", "run", str(folder), "main")
    admin = find_admin(common_dir(str(repo.path)), folder)
    assert admin is not None
    return Workspace(str(repo.path), folder, "run", "main", "main", repo.sha("main"),
                     admin=str(admin))


def plant(root: Path, relative: str, text: str = "import os; os._exit(0)\n") -> None:
    (root / relative).parent.mkdir(parents=True, exist_ok=True)
    (root / relative).write_text(text)


def test_what_the_agent_planted_for_the_runner_goes_and_its_work_stays(
        ws: Workspace, tmp_path: Path) -> None:
    root = ws.path
    plant(root, "unittest/__init__.py")         # shadows the standard library
    plant(root, "pluggy.py")                    # shadows what pytest imports
    os.symlink(tmp_path, root / "_pytest")      # a link Python follows to a package
    plant(root, "*.py")                         # a name that would be a glob: never a pattern
    plant(root, ".venv/lib/python3/site-packages/evil.pth", "import evil\n")
    plant(root, "__pycache__/conftest.cpython-311.pyc", "\0bytecode")
    plant(root, "plugs/mine.py", "cheat\n")      # named by the base's pyproject.toml
    plant(root, "conftest.py", "cheat\n")
    plant(root, "helpers/fixtures.py", "cheat\n")  # named by the base's tests/conftest.py
    plant(root, ".pytest_cache/v/cache/stepwise", '"tests/test_z.py::test_last"')  # --sw
    plant(root, "pkg/conftest.py", "cheat\n")
    plant(root, "site/new.html", "more docs\n")  # the agent's work: stays
    plant(root, "site/__init__.py", "")         # in a tracked folder: the project's own
    plant(root, "calc.py", "the fix\n")          # stays
    patterns = runner_specs(ws, PYTEST)
    done = restore(ws, ("tests/",), specs=patterns)
    assert done.changed == [".pytest_cache/v/cache/stepwise", "_pytest", "conftest.py",
                            "helpers/fixtures.py", "pkg/conftest.py", "pluggy.py",
                            "plugs/mine.py", "unittest/__init__.py"]
    assert (root / "*.py").exists()  # never a pattern: it would match every top-level .py
    for gone in ("unittest", "pluggy.py", "_pytest", "pkg/conftest.py",
                 "__pycache__/conftest.cpython-311.pyc", ".pytest_cache/v/cache/stepwise",
                 ".venv/lib/python3/site-packages/evil.pth"):
        assert not os.path.lexists(root / gone), gone
    assert (root / "plugs" / "mine.py").read_text() == '"""the user\'s plugin"""\n'
    assert (root / "conftest.py").read_text() == "# the user's\n"
    assert (root / "site" / "new.html").exists() and (root / "calc.py").exists()
    assert (root / "site" / "__init__.py").exists()
    assert (tmp_path / "wt").is_dir()  # the link went, not what it led to


def test_a_check_folder_reached_through_a_link_shadows_nothing(ws: Workspace,
                                                                tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    plant(elsewhere, "pytest.py")
    os.symlink(elsewhere, ws.path / "sub")
    linked = Workspace(ws.repo, ws.path, ws.branch, ws.base, ws.base_ref, ws.base_sha,
                       subdir="sub", admin=ws.admin)
    patterns = runner_specs(linked, PYTEST)
    assert not any(p.endswith("sub/pytest.py") for p in patterns)
    restore(linked, ("tests/",), specs=patterns)
    assert (elsewhere / "pytest.py").exists()  # never reached through the link


def test_the_files_the_check_names_are_the_check(ws: Workspace, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ws.path / "site")  # paths are the top's, wherever loopctl runs
    plant(ws.path, "ci/check.sh", "exit 0\n")
    plant(ws.path, "ci/pytest.ini", "[pytest]\naddopts = -p evil\n")
    plant(ws.path, "calc.py", "the fix\n")
    check = ("sh", "ci/check.sh", "--config-file=ci/pytest.ini", "site", "ci/../calc.py*",
             "../outside", "/etc/passwd", ":", "calc.py2")
    assert rules.named_paths(check, "") == ["sh", "ci/check.sh", "ci/pytest.ini", "site",
                                            ":", "calc.py2"]
    patterns = runner_specs(ws, check)
    assert {":(top,literal)ci/check.sh", ":(top,literal)ci/pytest.ini"} <= set(patterns)
    assert ":(top,literal)site" not in patterns
    assert ":(top,glob)envplug.py*" in runner_specs(ws, check, {"PYTEST_PLUGINS": "envplug"})
    plant(ws.path, "plugs/json.py")  # plugs/ on PYTHONPATH: json.py there shadows json
    assert ":(top,literal)plugs/json.py" in runner_specs(ws, check, {"PYTHONPATH": "plugs"})
    assert ":(top,literal)plugs/json.py" not in runner_specs(ws, check, {})
    monkeypatch.chdir(tmp_path)
    done = restore(ws, ("tests/",), specs=patterns)
    assert done.changed == ["ci/check.sh", "ci/pytest.ini"]
    assert (ws.path / "ci" / "check.sh").read_text() == "exec pytest -c ci/pytest.ini\n"
    assert (ws.path / "calc.py").exists()


def test_a_check_folder_with_glob_characters_is_matched_as_named(ws: Workspace) -> None:
    for folder in ("a[1]", "a1"):
        plant(ws.path, f"{folder}/keep.txt", "kept\n")
    git(ws.path, "add", "-A")
    git(ws.path, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "folders")
    based = Workspace(ws.repo, ws.path, ws.branch, ws.base, ws.base_ref,
                      git(ws.path, "rev-parse", "HEAD").strip(), subdir="a[1]", admin=ws.admin)
    for folder in ("a[1]", "a1"):  # a namespace `pytest` with a __main__: run by `-m pytest`
        plant(ws.path, f"{folder}/pytest/__main__.py", "raise SystemExit(0)\n")
    done = restore(based, (), specs=runner_specs(based, PYTEST))
    assert done.changed == ["a[1]/pytest/__main__.py"]
    assert (ws.path / "a1" / "pytest" / "__main__.py").exists()
