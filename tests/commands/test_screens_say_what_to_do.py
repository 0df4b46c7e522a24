"""Issue 29, "a newcomer's first hour": every screen says what happened and
what to do. One test (or a few) per item; the drivers, doctor and the real
terminals are in tests/engine/test_drivers_say_what_happened.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import CLI, TESTS, agent_command, wait_for

ESC = "\x1b"
PINNED = "loopctl @ git+https://github.com/example/loopctl@v1.2.3"


def one_line_error(proc: Any) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {proc.stderr!r}"
    return lines[0]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=dict(os.environ, GIT_AUTHOR_NAME="t",
                                              GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
                                              GIT_COMMITTER_EMAIL="t@t")).stdout


def make_repo(tmp_path: Path, name: str = "repo") -> Path:
    repo = tmp_path / name
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "README").write_text("hello\n")
    git(repo, "add", "README")
    git(repo, "commit", "-q", "-m", "first")
    return repo


def files_of(home: Path) -> dict[str, bytes]:
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*"))
            if p.is_file() and not p.name.endswith(".lock")} if home.exists() else {}


# -- 1. why a run failed ---------------------------------------------------------------


def test_status_and_ls_say_why_the_last_run_failed(cli: CLI) -> None:
    cli("start", "p", "--name", "noagent", "--every", "1h", "--agent", "claude", check=0,
        env={"PATH": "/usr/bin:/bin"})
    cli("start", "p", "--name", "broke", "--every", "1h", "--command",
        agent_command("--print", "working", "--stderr", "Not logged in · Please run /login",
                      "--exit", "1"), check=0)
    cli("run", "noagent", env={"PATH": "/usr/bin:/bin"})
    cli("run", "broke")
    status = cli("status", "noagent", check=0).stdout
    assert re.search(r"^  reason     agent not found on PATH: claude; install it: `npm install "
                     r"-g @anthropic-ai/claude-code`$", status, re.M), status
    status = cli("status", "broke", check=0).stdout
    assert re.search(r"^  reason     Not logged in · Please run /login$", status, re.M), status
    assert cli.json("status", "broke")["last_run"]["reason"] == \
        "Not logged in · Please run /login"
    listing = cli("ls", env={"COLUMNS": "200"}, check=0).stdout
    assert "failed: agent not found on PATH: claude" in listing
    assert "failed: Not logged in · Please run /login" in listing
    by_name = {loop["name"]: loop for loop in cli.json("ls")["loops"]}
    assert by_name["noagent"]["last_run"]["reason"] == "agent not found on PATH: claude; " \
        "install it: `npm install -g @anthropic-ai/claude-code`"  # issue 51, item 4


def test_an_agent_cannot_drive_the_terminal_through_its_reason(cli: CLI) -> None:
    """The reason is the agent's own text: no escape sequence reaches `status`."""
    hostile = "\x1b]0;pwned\x07\x1b[2Jcleared \x9b31m red\x1b[0m"
    cli("start", "p", "--name", "hostile", "--every", "1h", "--command",
        agent_command("--stderr", hostile, "--exit", "3"), check=0)
    cli("run", "hostile")
    out = cli("status", "hostile", check=0).stdout + cli("ls", check=0).stdout
    assert ESC not in out and "\x9b" not in out and "\x07" not in out
    assert "cleared" in out


def test_a_forged_record_cannot_drive_the_terminal_either(cli: CLI, home: Path) -> None:
    """The agent runs as the user: it can write its own run's record. What
    `status`, `ls` and the daemon print from it is still one plain line."""
    cli("start", "p", "--name", "forged", "--every", "1h", "--command",
        agent_command("--exit", "3"), check=0)
    cli("run", "forged")
    [record_file] = (home / "state" / "runs" / "forged").glob("*.json")
    record = json.loads(record_file.read_text())
    record["note"] = "\x1b]52;c;cHduZWQ=\x07\x1b[2Jgone\nsecond line"
    record_file.write_text(json.dumps(record))
    out = cli("status", "forged", check=0).stdout + cli("ls", check=0).stdout
    assert ESC not in out and "\x07" not in out
    assert "gone second line" in out  # one line: its line break is a space


def test_events_print_the_evidence(cli: CLI) -> None:
    cli("start", "p", "--name", "flaky", "--every", "1h", "--max-failures", "1",
        "--command", agent_command("--exit", "2"), check=0)
    cli("run", "flaky")
    line = cli("events", check=0).stdout.strip().splitlines()[-1]
    assert "flaky: paused (failure_limit): 1 failure in a row" in line
    assert "flaky is paused" not in line  # the old summary only repeated the status


def test_events_print_the_agent_s_evidence_as_plain_text(cli: CLI) -> None:
    cli("start", "p", "--name", "done", "--every", "1h", "--command", agent_command(
        "--decide", "complete", "--summary", "all green", "--evidence",
        "tests pass\x1b[2J (42/42)"), check=0)
    cli("run", "done", check=0)
    line = cli("events", check=0).stdout.strip().splitlines()[-1]
    assert "done: completed: all green; evidence: tests pass" in line and "(42/42)" in line
    assert ESC not in line  # what is left of the sequence cannot drive a terminal


# -- 2. widths: free text gives way, identifiers never ---------------------------------


def test_ls_prints_two_long_names_apart_at_any_width(cli: CLI) -> None:
    for name in ("nightly-backup-primary", "nightly-backup-replica"):
        cli("start", "p", "--name", name, "--cron", "0 3 * * *", "--tz",
            "America/Argentina/Buenos_Aires", check=0)
    for columns in ("40", "80", "130"):
        out = cli("ls", env={"COLUMNS": columns}, check=0).stdout
        assert "nightly-backup-primary " in out and "nightly-backup-replica " in out, columns
    wide = cli("ls", env={"COLUMNS": "130"}, check=0).stdout
    assert "America/Argentina/Buenos_Aires" in wide and "…" not in wide


def write_record(cli: CLI, loop: str, run_id: str, **fields: Any) -> None:
    folder = cli.state_dir / "runs" / loop
    folder.mkdir(parents=True, exist_ok=True)
    record = {"version": 1, "run_id": run_id, "loop": loop, "outcome": "ok",
              "started_at": "2026-12-01T10:00:00Z", "ended_at": "2026-12-01T10:01:00Z",
              "duration_s": 60.0, "exit_code": 0, **fields}
    (folder / f"{run_id}.json").write_text(json.dumps(record))
    # As loopctl records a run: in the loop's index (a file alone is not a run).
    from loopctl.storage.paths import Paths
    from loopctl.storage.runs import remember

    remember(Paths(cli.home, cli.state_dir), loop, run_id)


def test_history_keeps_the_pr_url_whole_and_marks_what_it_cut(cli: CLI) -> None:
    cli("start", "p", "--name", "wt", "--every", "1h", check=0)
    url = "https://github.com/example-org/example-repository/pull/12345"
    write_record(cli, "wt", "20261201T100000Z-0001", handoff="pr_opened",
                 branch="loopctl/wt/20261201T100000Z-0001", pr_url=url, files_changed=1,
                 insertions=3, deletions=0)
    write_record(cli, "wt", "20261201T110000Z-0002", outcome="ok", handoff="handoff_failed",
                 branch="loopctl/wt/20261201T110000Z-0002",
                 handoff_error="remote: \x1b[31mpermission denied\x1b[0m " + "x" * 200)
    out = cli("history", "wt", env={"COLUMNS": "80"}, check=0).stdout
    first, second = [line for line in out.splitlines() if "loopctl/wt/" in line]
    assert url in first and first.endswith("…")  # the URL whole, the counts gave way
    assert second.endswith("…") and len(second) <= 80 and "remote: " in second
    assert ESC not in out
    wide = cli("history", "wt", env={"COLUMNS": "200"}, check=0).stdout
    assert f"{url} (1 file, +3 -0)" in wide and "1 files" not in wide
    assert "remote: permission denied" in wide and ESC not in wide  # the sequence goes whole


# -- 3. start keeps the comments of a hand-edited loops.yaml ---------------------------


@pytest.mark.parametrize("reader", ["validate", "status", "doctor"])
def test_start_keeps_comments_after_a_hand_edit(cli: CLI, home: Path, reader: str) -> None:
    cli("start", "p", "--name", "first", "--every", "1h", check=0)
    loops_file = home / "loops.yaml"
    with loops_file.open("a") as handle:
        handle.write("  # kept: a comment the user wrote\n  hand:\n    prompt: by hand"
                     "  # inline comment\n    every: 2h\n")
    cli(reader)  # reads the edited file; no driver pass rewrites the cache
    cli("start", "p", "--name", "second", "--every", "1h", check=0)
    text = loops_file.read_text()
    assert "# kept: a comment the user wrote" in text and "# inline comment" in text
    assert yaml.safe_load(text)["loops"].keys() == {"first", "hand", "second"}
    assert {loop["name"] for loop in cli.json("ls")["loops"]} == {"first", "hand", "second"}


# -- 5, 8, 9: what can be checked at start is checked there ---------------------------


BAD_AT_START = [
    (["--worktree", "--base", "nosuchbranch"], "bad --base 'nosuchbranch'"),
    (["--worktree", "--push", "nope"], "bad --push 'nope'"),
    (["--on-attention", "{missing}"], "no such file"),
    (["--on-attention", "{not_executable}"], "is not executable"),
    (["--every", "10"], "bad --every '10': give a unit, like 10s or 10m"),
    (["--timeout", "90"], "bad --timeout '90': give a unit"),
    # A digit of another script: a bad duration, not an unexpected error.
    (["--every", "\u00b2"], "bad --every '\u00b2': expected a duration"),
    (["--timeout", "\u0663m"], "bad --timeout '\u0663m': expected a duration"),
    (["--cron", "61 * * * *"], "bad --cron '61 * * * *'"),
    (["--cron", "0 9 * * *", "--tz", "Mars/Olympus"], "bad --tz 'Mars/Olympus'"),
    (["--push", "origin"], "--push needs --worktree"),
    (["--worktree", "--pr"], "--pr needs --push"),
    (["--every", "auto", "--min-delay", "1h", "--max-delay", "1m"],
     "--min-delay is longer than --max-delay"),
    (["--budget-usd", "-1"], "--budget-usd must be a positive number"),
]


@pytest.mark.parametrize("extra, message", BAD_AT_START,
                         ids=[m.split(":")[0][:30] for _, m in BAD_AT_START])
def test_start_refuses_what_would_fail_every_run(cli: CLI, home: Path, tmp_path: Path,
                                                 extra: list[str], message: str) -> None:
    repo = make_repo(tmp_path)
    hook = tmp_path / "hook.sh"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o644)
    extra = [a.format(missing=tmp_path / "missing.sh", not_executable=hook) for a in extra]
    if "--every" not in extra and "--cron" not in extra:
        extra += ["--every", "1h"]
    cli("start", "p", "--name", "ok", "--every", "1h", check=0)
    before = files_of(home)
    proc = cli("start", "probe", "--name", "probe", "--cwd", str(repo), *extra)
    assert proc.returncode == 2
    line = one_line_error(proc)
    assert message in line and "loop 'probe'" not in line, line
    assert files_of(home) == before


def test_a_repository_without_a_commit_is_refused_at_start(cli: CLI, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q", "-b", "main")
    proc = cli("start", "p", "--name", "w", "--every", "1h", "--cwd", str(empty), "--worktree")
    assert proc.returncode == 2
    assert "'main', has no commit to start runs from" in one_line_error(proc)


def test_update_checks_what_start_checks(cli: CLI, tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    cli("start", "p", "--name", "w", "--every", "1h", "--cwd", str(repo), "--worktree",
        check=0)
    for extra, message in [(["--base", "gone"], "bad --base 'gone'"),
                           (["--push", "nope"], "bad --push 'nope'"),
                           (["--every", "5"], "give a unit")]:
        proc = cli("update", "w", *extra)
        assert proc.returncode == 2 and message in one_line_error(proc)
    git(repo, "remote", "add", "origin", str(repo))
    cli("update", "w", "--push", "origin", check=0)


def test_an_unset_env_key_is_a_warning_at_start(cli: CLI) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LOOPCTL_TEST_UNSET"}
    proc = cli("start", "p", "--name", "e", "--every", "1h", "--env", "LOOPCTL_TEST_UNSET",
               "--env", "HOME", env=env, check=0)
    assert "warning: --env LOOPCTL_TEST_UNSET: LOOPCTL_TEST_UNSET is not set here" \
        in proc.stderr
    assert "--env HOME" not in proc.stderr


# -- 6, 7: stopped and failure-limited loops -------------------------------------------


def test_the_advice_for_a_stopped_loop_leads_out(cli: CLI) -> None:
    cli("start", "p", "--name", "t1", "--every", "1h", check=0)
    cli("stop", "t1", check=0)
    resume = one_line_error(cli("resume", "t1"))
    again = one_line_error(cli("start", "p", "--name", "t1", "--every", "1h"))
    for line in (resume, again):
        assert "`loopctl rm t1`" in line and "another --name" in line, line
        assert "loopctl update" not in line
    update = cli("update", "t1", "--max-runs", "9", check=0)
    assert "note: t1 is stopped and stays so" in update.stderr and "loopctl rm t1" in update.stderr
    cli("rm", "t1", check=0)
    cli("start", "p", "--name", "t1", "--every", "1h", check=0)


def test_resume_after_the_failure_limit_forgives_the_backoff(cli: CLI, home: Path) -> None:
    cli("start", "p", "--name", "f", "--every", "10m", "--max-failures", "2",
        "--command", agent_command("--exit", "1"), check=0)
    cli("run", "f")
    cli("run", "f")  # two failures: paused, the next due time backed off x4
    assert cli.json("status", "f")["reason"] == "failure_limit"
    cli("resume", "f", check=0)
    cli("tick", "--json", check=0)  # a driver pass, as under a daemon
    info = cli.json("status", "f")
    assert info["status"] in ("active", "running") and info["note"] is None, info
    state = json.loads((home / "state" / "state.json").read_text())["loops"]["f"]
    assert state["next_due"] - state["last_end"] <= 600 + 1


# -- 10, 11, 12 ------------------------------------------------------------------------


@pytest.mark.parametrize("option", ["--model", "--agent", "--env", "--agent-arg"])
def test_update_explains_the_objective_rule(cli: CLI, option: str) -> None:
    cli("start", "p", "--name", "u", "--every", "1h", check=0)
    proc = cli("update", "u", option, "x")
    assert proc.returncode == 2
    line = one_line_error(proc)
    assert f"{option} is part of the objective" in line and "loopctl rm NAME" in line
    assert "did you mean" not in line and "Possible options" not in line


def test_a_mistyped_option_gets_one_close_suggestion_or_none(cli: CLI) -> None:
    cli("start", "p", "--name", "u", "--every", "1h", check=0)
    assert one_line_error(cli("update", "u", "--evry", "1h")).startswith(
        "loopctl: error: no such option: --evry; did you mean --every?")
    line = one_line_error(cli("update", "u", "--zzz"))
    assert "did you mean" not in line and "Possible options" not in line


def test_rm_lists_the_branches_it_kept(cli: CLI, tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    cli("start", "p", "--name", "wt1", "--every", "1h", "--cwd", str(repo), "--worktree",
        check=0)
    branch = "loopctl/wt1/20261201T100000Z-0001"
    git(repo, "checkout", "-q", "-b", branch)
    (repo / "work.txt").write_text("the agent's work\n")
    git(repo, "add", "work.txt")
    git(repo, "commit", "-q", "-m", "work")
    git(repo, "checkout", "-q", "main")
    out = cli("rm", "wt1", check=0).stdout
    assert f"kept branch {branch} " in out and f"git branch -D {branch}" in out
    assert branch in git(repo, "branch", "--list", "loopctl/*")


def test_show_masks_env_values_and_reveal_prints_them(cli: CLI) -> None:
    cli("start", "p", "--name", "s", "--every", "1h", "--env", "ANTHROPIC_API_KEY=sk-ant-123",
        "--env", "PASSED", "--notify", "json://127.0.0.1:9/?token=tok-999", check=0)
    text = cli("show", "s", check=0).stdout
    shown = cli("show", "s", "--json", check=0).stdout
    for out in (text, shown):
        assert "sk-ant-123" not in out and "tok-999" not in out and "****" in out
    assert json.loads(shown)["definition"]["env"] == {"ANTHROPIC_API_KEY": "****",
                                                      "PASSED": None}
    revealed = cli("show", "s", "--reveal", check=0).stdout
    assert "sk-ant-123" in revealed
    assert json.loads(cli("show", "s", "--json", "--reveal", check=0).stdout)[
        "definition"]["env"]["ANTHROPIC_API_KEY"] == "sk-ant-123"


# -- 13. exports -----------------------------------------------------------------------


def exported(cli: CLI, name: str, *args: str) -> tuple[dict[str, Any], str]:
    proc = cli("export", name, *args, "--json", check=0)
    return json.loads(proc.stdout), proc.stderr


def test_systemd_every_waits_after_the_run_like_loopctl(cli: CLI) -> None:
    cli("start", "p", "--name", "fast", "--every", "30s", check=0)
    cli("start", "p", "--name", "slow", "--every", "10m", "--after", "5m", check=0)
    fast, _ = exported(cli, "fast", "--to", "systemd")
    timer = fast["files"]["loopctl-fast.timer"]
    assert "OnUnitInactiveSec=30s" in timer and "OnCalendar" not in timer
    assert not any("cron" in w for w in fast["warnings"])
    slow, _ = exported(cli, "slow", "--to", "systemd")
    timer = slow["files"]["loopctl-slow.timer"]
    assert "OnActiveSec=300s" in timer and "OnUnitInactiveSec=600s" in timer


def test_the_github_export_of_a_hand_off_loop_can_push_and_open_the_pr(
        cli: CLI, tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    git(repo, "remote", "add", "origin", str(repo))
    cli("start", "p", "--name", "gh", "--every", "1h", "--cwd", str(repo), "--worktree",
        "--push", "origin", "--pr", check=0)
    cli("start", "p", "--name", "plain", "--every", "1h", check=0)
    result, _ = exported(cli, "gh", "--to", "github", "--install", PINNED)
    workflow = yaml.safe_load(result["files"]["loopctl-gh.yml"])
    # PR feedback (on by default, --fix-attempts 3) reads the checks and failed logs.
    assert workflow["permissions"] == {"contents": "write", "pull-requests": "write",
                                       "checks": "read", "statuses": "read", "actions": "read"}
    assert workflow["jobs"]["run"]["env"]["GH_TOKEN"] == "${{ github.token }}"
    cli("update", "gh", "--fix-attempts", "0", check=0)
    result, _ = exported(cli, "gh", "--to", "github", "--install", PINNED)
    workflow = yaml.safe_load(result["files"]["loopctl-gh.yml"])
    assert workflow["permissions"] == {"contents": "write", "pull-requests": "write"}
    warnings = " ".join(result["warnings"])
    assert "start no other workflow" in warnings and "personal access token" in warnings
    assert "60 days" in warnings
    plain, _ = exported(cli, "plain", "--to", "github", "--install", PINNED)
    workflow = yaml.safe_load(plain["files"]["loopctl-plain.yml"])
    assert workflow["permissions"] == {"contents": "read"}
    assert "GH_TOKEN" not in workflow["jobs"]["run"].get("env", {})


def test_the_next_steps_name_the_paths_given(cli: CLI, tmp_path: Path) -> None:
    cli("start", "p", "--name", "n", "--every", "1h", "--env", "API_KEY=v", check=0)
    out, secrets = tmp_path / "out dir", tmp_path / "n.env"
    for target, extra in [("systemd", []), ("crontab", []), ("github", ["--install", PINNED]),
                          ("k8s", ["--image", "img:1", "--secrets-file", str(secrets)])]:
        proc = cli("export", "n", "--to", target, "-o", str(out), *extra, check=0)
        steps = [line for line in proc.stderr.splitlines() if line.startswith("next: ")]
        assert steps and any(f"'{out}/" in step for step in steps), (target, steps)
        if target == "k8s":
            assert any(f"--from-env-file={secrets}" in step for step in steps), steps


# -- 14. logs -f before the first run --------------------------------------------------


def test_logs_follow_waits_for_the_first_run(cli: CLI) -> None:
    cli("start", "p", "--name", "later", "--every", "1h", "--command",
        agent_command("--print", "first-run-output"), check=0)
    assert "logs -f later" in one_line_error(cli("logs", "later"))
    err_file = cli.home.parent / "follow.err"
    with err_file.open("w") as err_handle:
        follower = cli.popen("logs", "later", "-f", stdout=subprocess.PIPE, stderr=err_handle)
    try:
        wait_for(lambda: "waiting for the first run of later" in err_file.read_text())
        cli("run", "later", check=0)
        out, _ = follower.communicate(timeout=30)
    finally:
        if follower.poll() is None:
            follower.kill()
    err = err_file.read_text()
    assert follower.returncode == 0, err
    assert "first-run-output" in out and "ended" in out and "Traceback" not in err


# -- 15. smaller ------------------------------------------------------------------------


def test_small_costs_and_budgets_keep_their_digits(cli: CLI, home: Path) -> None:
    # Not due (--after): no run in flight settles and rewrites the state under
    # the edit below (a race CI lost once).
    cli("start", "p", "--name", "cheap", "--every", "1h", "--after", "1h",
        "--budget-usd", "0.0005", check=0)
    cli("tick", "--json")
    path = home / "state" / "state.json"
    state = json.loads(path.read_text())
    state["loops"]["cheap"]["cost_usd"] = 0.00028
    path.write_text(json.dumps(state))
    out = cli("status", "cheap", check=0).stdout
    assert "cost       $0.00028 of $0.0005" in out, out


@pytest.mark.parametrize("amount, shown", [
    (0, "$0.00"), (0.00028, "$0.00028"), (0.0005, "$0.0005"), (0.004, "$0.004"),
    (0.01, "$0.01"), (1.234, "$1.23"), (12.5, "$12.50")])
def test_dollars_to_the_cent_and_below_it_two_digits(amount: float, shown: str) -> None:
    from loopctl.domain.durations import format_usd

    assert format_usd(amount) == shown


def test_an_unknown_top_level_key_names_its_own_line(cli: CLI, home: Path) -> None:
    cli("start", "p", "--name", "a", "--every", "1h", check=0)
    loops_file = home / "loops.yaml"
    text = loops_file.read_text()
    assert "  prompt:" in text  # `prompt:` indented, inside the loop
    loops_file.write_text(text + "prompt: at the top level\n")
    line_no = len(loops_file.read_text().splitlines())
    proc = cli("validate")
    assert proc.returncode == 3
    assert f"line {line_no}: unknown top-level key 'prompt'" in one_line_error(proc)


def test_the_man_page_and_completions(cli: CLI) -> None:
    root = TESTS.parent
    man = (root / "man" / "loopctl.1").read_text()
    assert "NEXT_" not in man and "DURATION" in man
    bash = (root / "completions" / "loopctl.bash").read_text()
    assert re.search(r'--merge\) COMPREPLY=\(\$\(compgen -W "squash merge rebase"', bash)
    zsh = (root / "completions" / "loopctl.zsh").read_text()
    assert "(squash merge rebase)" in zsh


def test_the_run_log_names_the_hand_off_once(cli: CLI, tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    cli("start", "p", "--name", "nc", "--every", "1h", "--cwd", str(repo), "--worktree",
        "--command", agent_command("--print", "nothing to change"), check=0)
    cli("run", "nc", check=0)
    log = cli("logs", "nc", check=0).stdout
    assert "# loopctl: hand-off: no_change" in log and "handoff no_change" not in log

