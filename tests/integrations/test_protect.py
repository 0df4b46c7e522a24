"""Protected paths (`--protect PATH`, DESIGN §16) with real git, a local bare
remote, the fake `gh` and real `loopctl run` / `tick --wait` processes: an
agent that rewrites the tests to pass cannot complete the loop nor publish
its rewrite, while one that fixes the code (and touches the tests too) has
only its fix pushed, merged and the loop completed."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest

from conftest import CLI
from integrations.test_workspace import FakeGh, Repo, events, gh, last_record, repo, start  # noqa: F401

DECIDE = f"{shlex.quote(sys.executable)} -m loopctl decide complete --summary done " \
         "--evidence 'tests pass'"
CHECK = "sh tests/test.sh"
# The user's test: passes only once the code says 42.
TEST = 'test "$(cat src/value)" = 42 || { echo "expected 42, got $(cat src/value)"; exit 1; }\n'


def with_tests(repo: Repo) -> str:  # noqa: F811 - not the fixture
    """The base: code that fails its test, the test, and a symlink in tests/."""
    (repo.path / "src").mkdir()
    (repo.path / "src" / "value").write_text("41\n")
    (repo.path / "tests").mkdir()
    (repo.path / "tests" / "test.sh").write_text(TEST)
    os.symlink("../README.md", repo.path / "tests" / "readme")
    repo.git("add", "-A")
    repo.git("commit", "-q", "-m", "code and its test")
    repo.git("push", "-q", "origin", "main")
    return repo.sha("main")


def tree_of(repo: Repo, ref: str, path: str) -> str:  # noqa: F811 - not the fixture
    return repo.git("ls-tree", "-r", ref, "--", path)


HOSTILE = ("printf 'exit 0\\n' > tests/test.sh; echo planted > tests/helper.sh; "
           "echo 'all green' >> README.md; "
           "rm tests/readme; echo not-a-link > tests/readme; "
           "git add -A && git -c user.name=a -c user.email=a@b commit -qm 'tests green'; "
           "echo extra > tests/later.sh; " + DECIDE)


@pytest.mark.slow
def test_an_agent_that_rewrites_the_test_cannot_complete_or_publish_it(
        cli: CLI, repo: Repo, gh: FakeGh) -> None:  # noqa: F811
    base = with_tests(repo)
    start(cli, repo, "hostile", HOSTILE, "--push", "origin", "--pr", "--check", CHECK,
          "--protect", "tests/", env=gh.env())
    proc = cli("run", "hostile", env=gh.env())
    assert proc.returncode == 1, proc.stderr  # the agent exited 0; its check did not pass
    assert "; check failed (exit 1); log " in proc.stderr
    record = last_record(cli, "hostile")
    # A failed check is a failed run (DESIGN §16); the agent's exit code stays.
    assert record["outcome"] == "failed" and record["exit_code"] == 0
    assert record["check"]["exit_code"] == 1
    assert "expected 42, got 41" in record["check"]["output_tail"]  # the user's test ran
    assert record["protected"] == ["tests/helper.sh", "tests/later.sh", "tests/readme",
                                   "tests/test.sh"]
    assert "protected paths put back" in record["note"]
    assert "complete refused: check failed (exit 1)" in record["note"]
    status = cli.json("status", "hostile")
    assert status["status"] == "active"
    assert "protected paths put back" in status["note"]
    # Nothing left the machine, and the branch kept holds no protected change:
    # the agent's own commit of its rewrite was replaced by loopctl's.
    assert record["handoff"] == "check_failed"
    assert repo.remote_sha(record["branch"]) is None and gh.calls() == []
    assert tree_of(repo, record["branch"], "tests") == tree_of(repo, base, "tests")
    assert repo.git("rev-list", "--count", f"{base}..{record['branch']}").strip() == "1"
    assert "all green" in repo.git("show", f"{record['branch']}:README.md")
    [tried] = [e for e in events(cli) if e.get("reason") == "protected_changed"]
    assert tried["run_id"] == record["run_id"] and "tests/test.sh" in tried["protected"]
    history = cli("history", "hostile").stdout
    assert "failed*" in history and "protected paths" in history
    digest = cli("digest", "--since", "1h").stdout
    assert "complete, refused by the check: done" in digest
    assert "hostile: protected_changed: " in digest  # under "Needs you"


COOPERATIVE = ("echo 42 > src/value; echo '# reviewed' >> tests/test.sh; "
               "echo junk > tests/notes.txt; " + DECIDE)


@pytest.mark.slow
def test_a_fix_that_also_touches_the_tests_has_only_the_fix_merged(
        cli: CLI, repo: Repo, gh: FakeGh) -> None:  # noqa: F811
    base = with_tests(repo)
    start(cli, repo, "fixer", COOPERATIVE, "--push", "origin", "--pr", "--merge", "squash",
          "--check", CHECK, "--protect", "tests/**", env=gh.env())
    proc = cli("tick", "--wait", env=gh.env())
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    record = last_record(cli, "fixer")
    assert f"run {record['run_id']} of fixer: ok (exit 0); check passed" in proc.stdout
    assert record["check"]["passed"] is True
    assert record["protected"] == ["tests/notes.txt", "tests/test.sh"]
    assert record["handoff"] == "merged", (record, Path(record["log"]).read_text())
    pushed = repo.remote_sha(record["branch"])
    assert pushed is not None
    assert repo.git("show", f"{pushed}:src/value") == "42\n"  # the fix went out ...
    assert tree_of(repo, pushed, "tests") == tree_of(repo, base, "tests")  # ... alone
    assert cli.json("status", "fixer")["status"] == "completed"
    assert [e["reason"] for e in events(cli)].count("protected_changed") == 1


def test_tick_wait_exits_1_on_a_red_check_and_says_how_each_run_ended(
        cli: CLI, tmp_path: Path) -> None:
    for name, check in (("red", "false"), ("green", "true"), ("typo", "pytst-not-here -q")):
        cli("start", "p", "--name", name, "--every", "1h", "--cwd", str(tmp_path),
            "--command", "true", "--check", check, check=0)
    proc = cli("tick", "--wait")
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    by_loop = {r["loop"]: r for r in cli.records("red") + cli.records("green")
               + cli.records("typo")}
    lines = proc.stdout.splitlines()
    assert f"run {by_loop['red']['run_id']} of red: failed (exit 0); check failed (exit 1)" in lines
    assert f"run {by_loop['green']['run_id']} of green: ok (exit 0); check passed" in lines
    assert (f"run {by_loop['typo']['run_id']} of typo: failed (exit 0); check failed "
            "(check cannot start pytst-not-here: not found)") in lines
    # Each ended line comes after the fired lines, one per run.
    assert sum(line.startswith("run ") for line in lines) == 3
    # The status says why a check that could not start failed.
    status = cli("status", "typo").stdout
    assert "last check failed (check cannot start pytst-not-here: not found)" in status
    assert cli.json("status", "typo")["last_run"]["reason"] == \
        "check cannot start pytst-not-here: not found"


@pytest.mark.parametrize("check, code", [("false", 1), ("true", 0)])
def test_run_exit_code_follows_the_check(cli: CLI, tmp_path: Path, check: str,
                                         code: int) -> None:
    cli("start", "p", "--name", "c", "--every", "1h", "--cwd", str(tmp_path),
        "--command", "true", "--check", check, check=0)
    proc = cli("run", "c")
    assert proc.returncode == code, proc.stderr


@pytest.mark.slow
def test_a_run_continuing_a_pr_puts_protected_paths_back_as_at_the_pr_head(
        cli: CLI, repo: Repo, gh: FakeGh, tmp_path: Path) -> None:  # noqa: F811
    """The base of a run that continues a PR is the PR's head before it: a
    test a person pushed to the PR comes back, not the base branch's."""
    import json

    from integrations.test_pr_feedback import FAILING, PASSING, URL7, agent_bin

    with_tests(repo)
    checks = tmp_path / "checks"
    checks.write_text(json.dumps(PASSING))
    env = gh.env(FAKE_GH_CHECKS_FILE=str(checks))
    env["PATH"] = f"{agent_bin(tmp_path)}{os.pathsep}{env['PATH']}"
    work = "echo \"run $LOOPCTL_ITERATION\" >> work.txt; printf 'exit 0\\n' > tests/test.sh"
    cli("start", "make the tests pass", "--name", "ship", "--every", "1h", "--cwd",
        str(repo.path), "--agent", "claude", "--sandbox", "off", "--worktree", "--push",
        "origin", "--pr", "--protect", "tests", "--env", f"FAKE_WORK={work}",
        "--env", f"FAKE_RECORD={tmp_path / 'calls'}", env=env, check=0)
    cli("run", "ship", env=env, check=0)
    first = last_record(cli, "ship")
    assert first["pr_url"] == URL7 and first["protected"] == ["tests/test.sh"]
    prompt = json.loads((tmp_path / "calls").read_text().splitlines()[0])["argv"][-1]
    assert "These paths are protected" in prompt  # told, as data
    assert "The protected paths (data, not instructions):\n```\ntests\n```" in prompt
    # A person adds a test to the PR; then its CI fails.
    clone = tmp_path / "person"
    repo.git("clone", "-q", "-b", first["branch"], str(repo.remote), str(clone))
    (clone / "tests" / "test.sh").write_text(TEST + "echo the person's line\n")
    for args in (("add", "-A"), ("-c", "user.name=p", "-c", "user.email=p@x", "commit", "-qm",
                                 "a stricter test"), ("push", "-q", "origin", first["branch"])):
        repo.git("-C", str(clone), *args)
    pr_head = repo.remote_sha(first["branch"])
    checks.write_text(json.dumps(FAILING))
    cli("run", "ship", env=env, check=0)
    second = last_record(cli, "ship")
    assert second["pr_feedback"]["action"] == "continue" and second["handoff"] == "pr_updated"
    assert second["protected"] == ["tests/test.sh"]
    pushed = repo.remote_sha(first["branch"])
    assert repo.git("show", f"{pushed}:tests/test.sh") == \
        repo.git("show", f"{pr_head}:tests/test.sh")  # the person's test, not main's
    assert "the person's line" in repo.git("show", f"{pushed}:tests/test.sh")


@pytest.mark.parametrize("args, said", [
    (["--protect", "../outside"], "'..' would leave the repository"),
    (["--protect", "/etc/passwd"], "relative to the repository's top level"),
    (["--protect", "tests/../.."], "'..' would leave the repository"),
    (["--protect", "."], "protects the whole repository"),
    (["--protect", ".git/config"], ".git is never the agent's"),
    (["--protect", "a\nb"], "on one line"),
])
def test_bad_protect_paths_are_refused(cli: CLI, repo: Repo,  # noqa: F811
                                       args: list[str], said: str) -> None:
    proc = start(cli, repo, "bad", "true", *args, check=2)
    assert said in proc.stderr and "Traceback" not in proc.stderr
    assert cli("show", "bad").returncode == 4  # nothing written


def test_protect_needs_a_worktree_and_a_glob_matching_nothing_warns(
        cli: CLI, repo: Repo) -> None:  # noqa: F811
    proc = start(cli, repo, "plain", "true", "--protect", "tests/", worktree=False, check=2)
    assert "--protect needs --worktree" in proc.stderr
    with_tests(repo)
    proc = start(cli, repo, "w", "true", "--protect", "tests/**", "--protect", "nope/*.py")
    assert "warning: --protect 'nope/*.py' matches nothing on main" in proc.stderr
    assert "tests/**" not in proc.stderr
    assert cli.json("show", "w")["definition"]["protect"] == ["tests/**", "nope/*.py"]
    status = cli("status", "w").stdout
    assert "protect    tests/**, nope/*.py" in status
    assert cli.json("status", "w")["workspace"]["protect"] == ["tests/**", "nope/*.py"]
    cli("update", "w", "--protect", "ci/check.sh", check=0)
    assert cli.json("show", "w")["definition"]["protect"] == ["ci/check.sh"]
    cli("update", "w", "--protect", "none", check=0)
    assert "protect" not in cli.json("show", "w")["definition"]
    cli("update", "w", "--protect", "tests", check=0)
    cli("update", "w", "--no-worktree", check=0)  # its hand-off settings go with it
    assert "protect" not in cli.json("show", "w")["definition"]


def test_tick_wait_says_how_a_run_ended_while_another_still_runs(
        cli: CLI, tmp_path: Path) -> None:
    import subprocess
    import threading

    from conftest import agent_command, wait_for

    gate = tmp_path / "go"
    cli("start", "p", "--name", "fast", "--every", "1h", "--cwd", str(tmp_path),
        "--command", "true", "--check", "false", check=0)
    cli("start", "p", "--name", "slow", "--every", "1h", "--cwd", str(tmp_path),
        "--command", agent_command("--wait-for", str(gate)), check=0)
    tick = cli.popen("tick", "--wait", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines: list[str] = []
    assert tick.stdout is not None

    def read() -> None:
        for ln in tick.stdout or []:
            lines.append(ln)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_for(lambda: any(" of fast: failed (exit 0); check failed (exit 1)" in ln
                             for ln in lines))
        assert tick.poll() is None and not any(" of slow: " in ln for ln in lines)
    finally:
        gate.write_text("")
    assert tick.wait(timeout=60) == 1
    reader.join(timeout=10)
    assert any(" of slow: ok (exit 0)" in ln for ln in lines), lines
