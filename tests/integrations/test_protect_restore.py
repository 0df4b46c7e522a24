"""Putting protected paths back (integrations/protect.py) on a real git
worktree, against what a hostile agent can leave: a protected folder turned
into a symlink out of the worktree, a symlink of the base turned into a file,
a file turned into a folder, a nested repository, planted ignored files, and
paths that do not exist at the base. Nothing outside the worktree is touched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from workspace.repos import Repo, git, make_repo

from loopctl.domain import protect as rules
from loopctl.integrations.protect import remove_under, restore, unmatched
from loopctl.integrations.worktree import Workspace, common_dir, find_admin


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    repo: Repo = make_repo(tmp_path)
    (repo.path / "tests" / "data").mkdir(parents=True)
    (repo.path / "tests" / "test_a.py").write_text("assert real\n")
    (repo.path / "tests" / "data" / "in.txt").write_text("input\n")
    (repo.path / "ci").mkdir()
    (repo.path / "ci" / "check.sh").write_text("pytest\n")
    os.symlink("../README.md", repo.path / "tests" / "readme")
    (repo.path / ".gitignore").write_text(".env\n*.pyc\n")
    repo.git("add", "-A")
    repo.git("commit", "-q", "-m", "tests")
    folder = tmp_path / "wt"
    git(repo.path, "worktree", "add", "-q", "-b", "run", str(folder), "main")
    admin = find_admin(common_dir(str(repo.path)), folder)
    assert admin is not None
    return Workspace(str(repo.path), folder, "run", "main", "main", repo.sha("main"),
                     admin=str(admin))


def status(ws: Workspace) -> str:
    return git(ws.path, "status", "--porcelain", "--untracked-files=all", "--ignored")


def test_what_the_agent_left_under_protected_paths_goes_and_nothing_outside(
        ws: Workspace, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep me\n")
    tests = ws.path / "tests"
    (tests / "test_a.py").write_text("assert True  # rewritten\n")
    (tests / "readme").unlink()
    (tests / "readme").write_text("not a link any more\n")  # a symlink of the base
    (tests / "conftest.py").write_text("planted\n")
    (tests / "__pycache__").mkdir()
    (tests / "__pycache__" / "test_a.cpython-311.pyc").write_bytes(b"\0bytecode")  # ignored
    nested = tests / "nested"
    nested.mkdir()
    git(nested, "init", "-q")
    (nested / "x").write_text("x\n")
    os.rename(ws.path / "ci", tmp_path / "ci-moved")
    os.symlink(victim, ws.path / "ci")  # the protected file's folder, now a link out
    (ws.path / "src.py").write_text("the fix\n")  # not protected: stays
    done = restore(ws, ("tests/", "ci/check.sh", "newdir/**"))
    assert done.changed == ["ci/check.sh", "tests/conftest.py", "tests/nested/",
                            "tests/readme", "tests/test_a.py"]
    assert (tests / "test_a.py").read_text() == "assert real\n"
    assert os.readlink(tests / "readme") == "../README.md"  # a symlink again, not followed
    assert not (tests / "conftest.py").exists() and not nested.exists()
    assert not (tests / "__pycache__").exists()  # removed, but not reported as a change
    assert (ws.path / "ci" / "check.sh").read_text() == "pytest\n"
    assert not (ws.path / "ci").is_symlink()
    assert sorted(p.name for p in victim.iterdir()) == ["precious"]  # never written
    assert status(ws) == "?? src.py\n"
    assert done.flatten is False


def test_a_path_absent_at_the_base_loses_what_the_agent_added(ws: Workspace) -> None:
    (ws.path / "newdir" / "deep").mkdir(parents=True)
    (ws.path / "newdir" / "deep" / "a.txt").write_text("added\n")
    git(ws.path, "add", "newdir")  # staged, not committed
    done = restore(ws, ("newdir/",))
    assert done.changed == ["newdir/deep/a.txt"]
    assert not (ws.path / "newdir").exists()  # emptied folders go too
    assert status(ws) == ""


def test_commits_of_the_agent_that_touched_protected_paths_are_flagged(
        ws: Workspace) -> None:
    (ws.path / "tests" / "test_a.py").write_text("assert True\n")
    git(ws.path, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qam", "green")
    done = restore(ws, ("**/test_*.py",))
    assert done.changed == ["tests/test_a.py"] and done.flatten is True
    assert (ws.path / "tests" / "test_a.py").read_text() == "assert real\n"
    untouched = restore(ws, ("ci/",))
    assert untouched.changed == [] and untouched.flatten is False


def test_remove_under_never_follows_a_symlinked_folder(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_text("keep\n")
    root = tmp_path / "root"
    root.mkdir()
    os.symlink(outside, root / "link")
    remove_under(root, "link/f")
    assert (outside / "f").exists()
    remove_under(root, "link")  # the link itself goes, not what it names
    assert not (root / "link").exists() and (outside / "f").exists()


def test_unmatched_names_only_patterns_with_no_file_on_the_base(ws: Workspace) -> None:
    assert unmatched(ws.repo, "main", ("tests/", "**/check.sh", "nope/**", "tests/*.rs")) \
        == ["nope/**", "tests/*.rs"]


@pytest.mark.parametrize("pattern, spec", [
    ("tests/", ":(top,literal)tests"),
    ("./tests//unit", ":(top,literal)tests/unit"),
    ("tests/**", ":(top,glob)tests/**"),
    (":(icase)x", ":(top,literal):(icase)x"),  # magic of its own means itself
])
def test_patterns_become_pathspecs_from_the_top(pattern: str, spec: str) -> None:
    assert rules.problem(pattern) is None
    assert rules.pathspec(pattern) == spec


@pytest.mark.parametrize("pattern", ["../x", "/abs", "~/x", "a/../../b", ".", "**", "./",
                                     ".git/hooks", "a\x1b[2Jb", "x" * 2000, 7])
def test_bad_patterns_are_refused(pattern: object) -> None:
    assert rules.problem(pattern) is not None


def test_no_filter_driver_runs_while_paths_are_put_back(ws: Workspace, tmp_path: Path) -> None:
    """An unconfined agent can write the repository's config and the
    attributes: a filter it names must not run when loopctl hashes or
    writes protected files."""
    marker = tmp_path / "ran"
    program = f"sh -c 'echo ran >> {marker}; cat'"
    for key in ("clean", "smudge"):
        git(ws.repo, "config", f"filter.evil.{key}", program)
    git(ws.repo, "config", "filter.evil.required", "true")
    (ws.path / ".gitattributes").write_text("* filter=evil\n")
    (ws.path / "tests" / "test_a.py").write_text("assert True\n")
    os.utime(ws.path / "tests" / "data" / "in.txt", (1, 1))  # stat-dirty: hashed again
    done = restore(ws, ("tests/",))
    assert done.changed == ["tests/test_a.py"]
    assert (ws.path / "tests" / "test_a.py").read_text() == "assert real\n"
    assert not marker.exists()


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def write(self, line: str) -> None:
        self.lines.append(line)


def test_paths_that_cannot_be_put_back_fail_the_run_closed(ws: Workspace) -> None:
    """A git error while restoring: no check, no commit, no hand-off beyond
    the machine, and the agent's `complete` does not stand."""
    from loopctl.domain.model import parse_loop
    from loopctl.domain.state import RunResult
    from loopctl.engine.run_context import RunContext
    from loopctl.engine.steps import handoff, protect

    loop = parse_loop("p", {"prompt": "x", "every": "1h", "worktree": True, "push": "origin",
                            "protect": ["tests/"], "check": "true"})
    result = RunResult("ok", 0, 0.0, 1.0, decision={"decision": "complete"})
    ctx = RunContext(None, "p", "20261203T000000Z-0001", False, _Log(), [], None)  # type: ignore[arg-type]
    broken = Workspace(ws.repo, ws.path, ws.branch, ws.base, ws.base_ref, "0" * 40,
                       admin=ws.admin)  # a base git does not have
    guarded = protect.restore(ctx, broken, loop, result)
    assert guarded is not None and guarded.failed and result.decision is None
    assert "protect failed: " in (result.note or "") and ctx.dropped
    assert protect.hold(guarded, loop).push is None
    made = handoff.commit(ctx, broken, loop, {"iteration": 1}, result, guarded)
    assert made.failure and "not committed" in made.failure


@pytest.mark.parametrize("value, said", [
    (["../x"], "'..' would leave the repository"),
    (["/etc"], "relative to the repository"),
    ("tests/", "must be a list"),
    ([7], "expected a path or glob"),
    (["tests/"] * 101, "at most 100"),
])
def test_a_hand_edited_protect_list_is_refused_in_one_line(value: object, said: str) -> None:
    from loopctl.domain.errors import UsageError
    from loopctl.domain.model import parse_loop

    with pytest.raises(UsageError) as caught:
        parse_loop("p", {"prompt": "x", "every": "1h", "worktree": True, "protect": value})
    assert said in caught.value.message and caught.value.message.startswith("loop 'p': ")
    assert "\n" not in caught.value.message


def test_protect_without_a_worktree_is_refused_in_loops_yaml() -> None:
    from loopctl.domain.errors import UsageError
    from loopctl.domain.loop_raw import to_raw
    from loopctl.domain.model import parse_loop

    with pytest.raises(UsageError, match="'protect' needs 'worktree: true'"):
        parse_loop("p", {"prompt": "x", "every": "1h", "protect": ["tests/"]})
    loop = parse_loop("p", {"prompt": "x", "every": "1h", "worktree": True,
                            "protect": ["tests/", "tests/"]})
    assert loop.protect == ("tests/",) and to_raw(loop)["protect"] == ["tests/"]


@pytest.mark.parametrize("flag", ["--assume-unchanged", "--skip-worktree"])
def test_an_index_entry_the_agent_flagged_hides_no_edit(ws: Workspace, flag: str) -> None:
    """An unconfined agent can write the worktree's index: a rewritten test
    whose entry says `unchanged` (or is staged and then hidden) is still
    found, put back, and its entry reset, so the commit takes none of it."""
    test = ws.path / "tests" / "test_a.py"
    test.write_text("assert True  # rewritten\n")
    if flag == "--skip-worktree":
        git(ws.path, "add", "tests/test_a.py")
    git(ws.path, "update-index", flag, "tests/test_a.py")
    assert git(ws.path, "diff", "--name-only", "main") in ("", "tests/test_a.py\n")
    done = restore(ws, ("tests/",))
    assert done.changed == ["tests/test_a.py"]
    assert test.read_text() == "assert real\n"
    assert git(ws.path, "ls-files", "-v", "tests/test_a.py") == "H tests/test_a.py\n"
    assert git(ws.path, "diff", "--cached", "--name-only", "main") == ""


def test_an_edit_the_index_cannot_see_by_its_stat_data_is_still_committed(
        tmp_path: Path) -> None:
    """git tells a same-size edit made within the second its index was
    written only by content ("racily clean"). Putting protected paths back
    rewrites the index a second later; done from outside the work tree, git
    could not re-check such an entry, and the agent's fix of an unprotected
    file looked committed already (the run handed off nothing)."""
    import time

    from loopctl.integrations.delivery import commit

    repo: Repo = make_repo(tmp_path)
    (repo.path / "value").write_text("41\n")
    (repo.path / "tests").mkdir()
    (repo.path / "tests" / "t.sh").write_text("t\n")
    repo.git("add", "-A")
    repo.git("commit", "-q", "-m", "base")
    while time.time() % 1 > 0.2:  # start early in a second: the race is then certain
        time.sleep(0.01)
    folder = tmp_path / "wt"
    git(repo.path, "worktree", "add", "-q", "-b", "run", str(folder), "main")
    (folder / "value").write_text("42\n")  # same size, same second as the index
    with open(folder / "tests" / "t.sh", "a") as handle:
        handle.write("# touched\n")
    second = int(time.time())
    while int(time.time()) == second:  # the index rewrite falls in the next second
        time.sleep(0.01)
    admin = find_admin(common_dir(str(repo.path)), folder)
    ws = Workspace(str(repo.path), folder, "run", "main", "main", repo.sha("main"),
                   admin=str(admin))
    assert restore(ws, ("tests/",)).changed == ["tests/t.sh"]
    made = commit(ws, "fix", "20261203T000000Z-0001")
    assert made.info["commits"] == 1, made
    assert repo.git("show", "run:value") == "42\n"
