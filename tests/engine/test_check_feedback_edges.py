"""A review of the check, PR feedback, notes and accounts as an attacker and
a newcomer: each test here guards a finding (pure or in-process, cheap)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from commands.test_screens_say_what_to_do import write_record
from fixed_zone import UTC
from integrations.test_workspace import FakeGh, Repo, gh, last_record, repo  # noqa: F401 - fixtures

from conftest import CLI
from loopctl.domain import lifecycle, verify
from loopctl.domain.checks import MAX_COMMAND
from loopctl.domain.errors import UsageError
from loopctl.domain.model import parse_loop
from loopctl.domain.state import LoopState, RunResult, new_loop_state


def loop_with(**extra: Any) -> Any:
    return parse_loop("l", {"prompt": "make the tests pass", "every": "1m", "agent": "claude",
                            "check": "pytest -q", **extra})


def refused(raw: dict[str, Any]) -> str:
    base: dict[str, Any] = {"prompt": "p", "every": "1m"}
    if "command" not in raw:
        base["agent"] = "claude"
    with pytest.raises(UsageError) as caught:
        parse_loop("l", {**base, **raw})
    return caught.value.message


# -- hand-edited loops.yaml --------------------------------------------------------------


@pytest.mark.parametrize("key", ["check", "command", "if"])
def test_a_nul_in_a_command_is_refused_where_it_is_written(key: str) -> None:
    # Found: `check: ["a\0b"]` was valid; the supervisor then died on
    # execve's ValueError and the loop sat `running` until the reaper.
    raw: dict[str, Any] = {key: ["prog", "a\0b"]}
    if key == "if":
        raw["command"] = ["true"]  # a gate needs no agent
    message = refused(raw)
    assert "NUL" in message and "\n" not in message


@pytest.mark.parametrize("value", [
    "x" * (MAX_COMMAND + 1),                   # one word (shlex was minutes on 8 MiB)
    ["a"] * (MAX_COMMAND // 2 + 1),            # many short arguments
])
def test_a_huge_check_is_refused_in_one_short_line(value: object) -> None:
    message = refused({"check": value})
    assert f"longer than {MAX_COMMAND}" in message and len(message) < 200
    # What a person writes still passes.
    assert loop_with(check="pytest -q -x tests/").check == ("pytest", "-q", "-x", "tests/")


def test_a_huge_bad_duration_is_quoted_short() -> None:
    # Found: a 10 MiB `check_timeout` made a 10 MiB error line (validate,
    # ls, status all print it); every duration key shares the message.
    for key in ("check_timeout", "timeout"):
        message = refused({"check": "true", key: "x" * (10 * 2**20)})
        assert f"bad '{key}' 'xxx" in message and len(message) < 200, key


# -- the check's metric and a rate limit ---------------------------------------------------


def settle(loop: Any, st: LoopState, outcome: str, metric: float, now: float) -> None:
    st.status, st.reason, st.resume_at = "active", None, None  # the reset came
    lifecycle.claim(loop, st, now, "schedule", zone=UTC)
    check = verify.check_record(1, 1.0, "3 passed\n", metric)
    lifecycle.settle(loop, st, RunResult(outcome, 0, now, now + 1, check=check,
                                         track_progress=True), now + 1, zone=UTC)


def test_a_rate_limited_run_does_not_use_up_no_progress() -> None:
    # Found: a `deferred` run (the account hit its limit; the run gives its
    # iteration back) still fed its unchanged metric to --no-progress, so a
    # loop that met a usage limit twice paused `no_progress` after one run.
    loop = loop_with(check_metric=r"(\d+) passed", no_progress=3, max_failures=0)
    st = new_loop_state(loop, 1000.0, zone=UTC)
    for i, outcome in enumerate(("ok", "deferred", "deferred", "ok")):
        settle(loop, st, outcome, 3.0, 1000.0 + 100 * i)
    assert (st.status, st.reason) == ("active", None)
    settle(loop, st, "ok", 3.0, 2000.0)  # three real runs, the metric unchanged
    assert (st.status, st.reason) == ("paused", "no_progress")


# -- newcomer screens -------------------------------------------------------------------


def test_history_says_a_complete_the_check_refused_did_not_stand(cli: CLI) -> None:
    # Found: the DECISION column said `complete` for a run whose complete the
    # check refused (the loop went on), and `fail 1 3` came with no key.
    cli("start", "p", "--name", "v", "--every", "1h", "--command", "true",
        "--check", "pytest -q", check=0)
    check = verify.check_record(1, 1.0, "3 passed, 1 failed\n", 3.0).to_json()
    said = {"decision": "complete", "summary": "done", "evidence": "I say so"}
    write_record(cli, "v", "20261201T100000Z-0001", decision=said, check=check,
                 note="complete refused: check failed (exit 1)")
    write_record(cli, "v", "20261201T110000Z-0002", decision=said,
                 check=verify.check_record(0, 1.0, "4 passed\n", 4.0).to_json())
    out = cli("history", "v", env={"COLUMNS": "80"}, check=0).stdout.splitlines()
    refused_row, passed_row = (row for row in out if row.startswith("2026"))
    assert " refused " in refused_row and "complete" not in refused_row
    assert refused_row.endswith("fail 1 3")
    assert " complete " in passed_row and passed_row.endswith("pass 4")
    legend = out[-1]
    assert legend.startswith("CHECK: ") and "…" not in legend and len(legend) <= 80


# -- the check and PR feedback together (real processes) ----------------------------------


def test_a_failing_check_pushes_nothing_to_the_pr_a_run_continues(
        cli: CLI, repo: Repo, gh: FakeGh, tmp_path: Path) -> None:  # noqa: F811
    # Built apart: the check holds the hand-off of a run from the base; a
    # run continuing a PR hands off by pushing to the PR's branch. A failing
    # check must hold that push too (else red work lands on the PR).
    from integrations.test_pr_feedback import FAILING, PASSING, URL7, agent_bin

    checks, flag = tmp_path / "checks", tmp_path / "red"
    checks.write_text(json.dumps(PASSING))
    env = gh.env(FAKE_GH_CHECKS_FILE=str(checks))
    env["PATH"] = f"{agent_bin(tmp_path)}{os.pathsep}{env['PATH']}"
    cli("start", "make the tests pass", "--name", "ship", "--every", "1h", "--cwd",
        str(repo.path), "--agent", "claude", "--sandbox", "off", "--worktree", "--push",
        "origin", "--pr", "--fix-attempts", "2",
        "--check", f"sh -c 'test ! -e {flag}'",
        "--env", "FAKE_WORK=echo \"run $LOOPCTL_ITERATION\" >> work.txt", env=env, check=0)
    cli("run", "ship", env=env, check=0)
    first = last_record(cli, "ship")
    assert (first["handoff"], first["pr_url"]) == ("pr_opened", URL7)

    checks.write_text(json.dumps(FAILING))  # the PR's CI fails ...
    flag.touch()  # ... and so does the loop's own check on the fix
    cli("run", "ship", env=env, check=1)  # its check failed
    second = last_record(cli, "ship")
    assert second["pr_feedback"]["action"] == "continue"
    assert second["handoff"] == "check_failed" and "pr_url" not in second, second
    assert repo.remote_sha(first["branch"]) == first["head"]  # the PR did not move

    flag.unlink()
    cli("run", "ship", env=env, check=0)  # the next fix passes: both commits go
    third = last_record(cli, "ship")
    assert (third["handoff"], third["pr_url"]) == ("pr_updated", URL7), third
    assert repo.remote_sha(first["branch"]) == third["head"]
    # The held commit went with it (the run started from the local branch).
    assert subprocess.run(["git", "-C", str(repo.path), "merge-base", "--is-ancestor",
                           second["head"], third["head"]]).returncode == 0


def test_a_fire_the_gate_skips_runs_no_check(cli: CLI, tmp_path: Path) -> None:
    # No agent ran: nothing to verify, and a passing check must not complete
    # an --until-check loop from a fire that did no work.
    mark = tmp_path / "checked"
    cli("start", "p", "--name", "g", "--every", "1h", "--cwd", str(tmp_path),
        "--command", "true", "--if", "false", "--check", f"touch {mark}", "--until-check",
        check=0)
    cli("run", "g")
    [record] = cli.records("g")
    assert record["outcome"] == "skipped" and "check" not in record
    assert not mark.exists()
    status = cli.json("status", "g")
    assert status["status"] == "active" and status["last_check"] is None


def test_the_envelope_with_a_check_and_a_pr_to_fix_stays_bounded() -> None:
    # Both blocks were built apart; together they stay within their two bounds.
    from loopctl.agents.envelope import wrap
    from loopctl.domain.feedback import LOG_TAIL, Check, Plan

    loop = loop_with(notes=True)
    st = new_loop_state(loop, 1000.0, zone=UTC)
    flood = ("\x1b[2J\u202e" + "y" * 100 + "\n") * 100_000  # 10 MiB, hostile
    fix = Plan("continue", "https://github.com/o/r/pull/7", "loopctl/l/20261201T030000Z-0001",
               failed=[Check("c" * 300, "fail", "l" * 300, "w" * 300)] * 50, attempt=1,
               limit=3, logs={"1": flood, "2": flood, "3": flood})
    last = verify.LastCheck(exit_code=1, passed=False, metric=None, output_tail=flood)
    text = wrap(loop, "make the tests pass", st, 2, 1000.0,
                {"branch": fix.branch, "base_ref": "origin/" + fix.branch},
                check=last, pr_fix=fix)
    assert len(text.encode()) < verify.TAIL + LOG_TAIL + 3000
    assert "\x1b" not in text and "\u202e" not in text
    assert "yyyy\n" in text and "fix attempt 1 of 3" in text  # both blocks are there


@pytest.mark.parametrize("last", [
    {"exit_code": 1.5, "passed": False}, {"exit_code": -5, "passed": False},
    {"exit_code": 3, "passed": True}, {"exit_code": None, "passed": True},
    {"exit_code": 0, "passed": False}, {"exit_code": True, "passed": False},
])
def test_a_damaged_last_check_is_dropped_not_shown(last: dict[str, Any]) -> None:
    # Found: state.json's `last_check` took any number and any `passed`;
    # the next envelope then told the agent "passed (exit 0)" of an exit 3.
    from loopctl.domain.state import repair

    loop = loop_with()
    st = new_loop_state(loop, 1000.0, zone=UTC)
    st.last_check = {"run_id": "20261201T030000Z-0001", "metric": None, **last}
    clean, bad = repair("l", st)
    assert clean.last_check is None and "last_check" in bad
    st.last_check = {"run_id": "20261201T030000Z-0001", "metric": 3.0, "exit_code": 1,
                     "passed": False}
    assert repair("l", st)[0].last_check == st.last_check  # a real one stays


@pytest.mark.parametrize(("record", "said"), [
    ({"outcome": "ok", "exit_code": 0, "note": "check cannot start pytest: not found",
      "check": verify.check_record(None, 0.0, "", None)},
     "ok (exit 0); check failed (check cannot start pytest: not found); log "),
    ({"outcome": "ok", "exit_code": 0, "note": "check metric: no match; check timed out "
      "after 5s", "check": verify.check_record(None, 5.0, "", None)},
     "ok (exit 0); check failed (check timed out after 5s); log "),
    ({"outcome": "gate_error", "exit_code": None,
      "note": "gate cannot start \x1b[2Jwatch: not found"},
     "gate_error (no exit code: gate cannot start watch: not found); log "),
    ({"outcome": "ok", "exit_code": 0, "note": "complete refused: check failed (exit 1)",
      "check": verify.check_record(1, 1.0, "", None)},
     "ok (exit 0); check failed (exit 1); log "),
    ({"outcome": "timeout", "exit_code": None}, "timeout (no exit code); log "),
])
def test_run_says_why_a_check_or_gate_gave_no_exit_code(record: dict[str, Any],
                                                        said: str) -> None:
    # Found: `run NAME` printed `check failed (exit None)` and `(the gate
    # exited None)` for a program that was not on PATH or timed out.
    from loopctl.cli.direct import run_line
    from loopctl.domain.run_record import RunRecord

    line = run_line(RunRecord.new("20261201T030000Z-0001", "x", log="L", **record))
    assert said in line and "None" not in line and "\x1b" not in line


def test_start_and_update_warn_of_a_check_or_gate_not_on_path(cli: CLI) -> None:
    # Found: the agent got `warning: claude is not on PATH`, a check did not:
    # `--check 'pytest -q'` without pytest refused every complete, silently.
    said = cli("start", "p", "--name", "w", "--every", "1h", "--command", "true",
               "--check", "no-such-check-xyz -q", "--if", "true", check=0).stderr
    assert "warning: no-such-check-xyz (the check) is not on PATH" in said
    assert "(the gate)" not in said  # `true` is
    said = cli("update", "w", "--if", "no-such-gate-xyz", "--check", "true", check=0).stderr
    assert "warning: no-such-gate-xyz (the gate) is not on PATH" in said
    assert "(the check)" not in said


def test_the_check_does_not_follow_a_symlink_the_agent_left_for_its_folder(
        cli: CLI, tmp_path: Path) -> None:
    # Found: a loop in a repository's subfolder runs its check in that
    # folder of the worktree; an agent that replaced it with a symlink had
    # the check run (and write, and print into the next envelope) wherever
    # the link pointed, outside the worktree.
    from integrations.test_workspace import make_repo, start

    made = make_repo(tmp_path)
    (made.path / "sub").mkdir()
    (made.path / "sub" / "keep.txt").write_text("x\n")
    made.git("add", "sub")
    made.git("commit", "-q", "-m", "sub")
    made.git("push", "-q", "origin", "main")  # the runs start from origin/main
    victim = tmp_path / "victim"
    victim.mkdir()
    start(cli, made.path / "sub", "v", f"cd .. && rm -rf sub && ln -s {victim} sub",
          "--push", "origin", "--check", "touch checked-here")
    cli("run", "v")
    record = last_record(cli, "v")
    assert not (victim / "checked-here").exists()
    assert "check" not in record or record["check"] is None
    assert "check not run" in record["note"] and "symlink" in record["note"]
    assert record["handoff"] == "check_failed"  # as after a failing check: nothing pushed


def test_a_pr_branch_whose_folder_is_a_symlink_is_not_continued(
        cli: CLI, repo: Repo, gh: FakeGh, tmp_path: Path) -> None:  # noqa: F811
    # Found: a run continuing a PR starts on the PR's branch, which earlier
    # agents wrote. One that committed the loop's folder as a symlink had
    # the next agent start (and be confined to) wherever the link pointed.
    from integrations.test_pr_feedback import FAILING, PASSING, URL7, agent_bin

    (repo.path / "sub").mkdir()
    (repo.path / "sub" / "keep.txt").write_text("x\n")
    repo.git("add", "sub")
    repo.git("commit", "-q", "-m", "sub")
    repo.git("push", "-q", "origin", "main")
    victim, checks = tmp_path / "victim", tmp_path / "checks"
    victim.mkdir()
    checks.write_text(json.dumps(PASSING))
    env = gh.env(FAKE_GH_CHECKS_FILE=str(checks))
    env["PATH"] = f"{agent_bin(tmp_path)}{os.pathsep}{env['PATH']}"
    work = f"touch agent-was-here; cd .. && rm -rf sub && ln -s {victim} sub"
    cli("start", "p", "--name", "ship", "--every", "1h", "--cwd", str(repo.path / "sub"),
        "--agent", "claude", "--sandbox", "off", "--worktree", "--push", "origin", "--pr",
        "--env", f"FAKE_WORK={work}", env=env, check=0)
    cli("run", "ship", env=env, check=0)
    assert last_record(cli, "ship")["pr_url"] == URL7  # its branch holds the symlink
    checks.write_text(json.dumps(FAILING))
    cli("run", "ship", env=env, check=0)
    second = last_record(cli, "ship")
    assert not (victim / "agent-was-here").exists()
    assert "not continued" in second["pr_feedback"]["note"], second["pr_feedback"]
    assert second["base_ref"] == "origin/main"  # a normal run from the base instead


def test_a_base_whose_folder_is_a_symlink_starts_no_run_there(tmp_path: Path) -> None:
    # With --merge an agent's commits reach the base: a later run from it
    # must not start (nor check) outside its worktree either.
    from integrations.test_workspace import make_repo

    from loopctl.integrations import worktree
    from loopctl.integrations.git import GitError

    made = make_repo(tmp_path)
    (made.path / "sub").mkdir()
    (made.path / "sub" / "keep.txt").write_text("x\n")
    made.git("add", "sub")
    made.git("commit", "-q", "-m", "sub")
    made.git("checkout", "-q", "-b", "merged")
    made.git("rm", "-q", "-r", "sub")
    os.symlink(tmp_path, made.path / "sub")
    made.git("add", "sub")
    made.git("commit", "-q", "-m", "the agent's symlink, merged")
    made.git("checkout", "-q", "main")  # the user's checkout still has the folder
    loop = parse_loop("v", {"prompt": "p", "every": "1h", "cwd": str(made.path / "sub"),
                            "worktree": True, "base": "merged", "agent": "claude"})
    folder = tmp_path / "wt"
    with pytest.raises(GitError, match="not a folder of the worktree"):
        worktree.prepare(loop, "20261201T030000Z-0001", folder)
    assert not folder.exists() and "loopctl/v/" not in made.git("branch")


@pytest.mark.parametrize("limit", [None, 0])
def test_status_of_a_pr_no_longer_followed_says_so(limit: int | None) -> None:
    # Found: after `update --no-pr` (or --fix-attempts 0) status said
    # `0 fix run(s) of None` of the PR state.json still remembers.
    from loop_object_support import loop_object

    from loopctl.cli.views import _pr_lines

    pr = {"url": "https://github.com/o/r/pull/7", "branch": "b", "fixes": 0, "review": False}
    [said] = _pr_lines(loop_object(pr_feedback=pr, workspace={"fix_attempts": limit}))
    assert "None" not in said and "of 0" not in said and "PR feedback is off" in said
    [said] = _pr_lines(loop_object(pr_feedback=pr, workspace={"fix_attempts": 3}))
    assert said.endswith("pull/7: 0 fix run(s) of 3")


def test_a_github_export_says_when_the_check_makes_a_run_outlast_a_hosted_job() -> None:
    # Found: the check's timeout joins the job's (right), and past GitHub's
    # 6-hour job limit the export said nothing: the run is cut off mid-way.
    import yaml

    from loopctl.integrations.export import GITHUB_HOSTED_MINUTES, Target, export

    pin = Target("github", install="loopctl @ git+https://github.com/o/loopctl@v1.2.3")
    fits = export(loop_with(every="10m", timeout="5h", check_timeout="40m"), pin)
    over = export(loop_with(every="10m", timeout="5h", check_timeout="1h"), pin)
    assert not any("ends a job" in w for w in fits.warnings)
    [said] = [w for w in over.warnings if "ends a job" in w]
    minutes = yaml.safe_load(over.files["loopctl-l.yml"])["jobs"]["run"]["timeout-minutes"]
    assert minutes > GITHUB_HOSTED_MINUTES and f"may take {minutes} minutes" in said


def test_doctor_names_a_check_or_gate_that_cannot_start(cli: CLI) -> None:
    # Found: doctor named an agent not on PATH, never a check or gate (both
    # fail every run then; the check refuses every complete).
    cli("start", "p", "--name", "w", "--every", "1h", "--command", "true",
        "--check", "no-such-check-xyz -q", "--if", "no-such-gate-xyz", check=0)
    cli("start", "p", "--name", "fine", "--every", "1h", "--command", "true",
        "--check", "true", check=0)
    said = cli("doctor").stdout
    assert "loop 'w': its check needs 'no-such-check-xyz', which is not on PATH" in said
    assert "loop 'w': its gate (--if) needs 'no-such-gate-xyz', which is not on PATH" in said
    assert "loop 'fine'" not in said
