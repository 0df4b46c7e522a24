"""The `claude` preset against the real Claude Code CLI (pinned in
tests/e2e/common.py), whose model is a local stub of the Anthropic Messages
API (tests/e2e/claude_stub.py). Only 127.0.0.1 is contacted.

Each test runs loopctl as a user would (`start`, then `run` in the
foreground) and checks that the decision protocol works through the CLI's
real tool loop and permission rules: `loopctl decide` via Bash, a refused
chained command, the final-message line, and `--continue-session` (all four
in the two runs of one loop), and resuming inside a worktree.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

import pytest

from conftest import CLI
from e2e.claude_stub import claude_api, messages, tool_results
from e2e.common import Stub, agent_cli, assert_auth_held, refusing

pytestmark = pytest.mark.slow


def claude_env(stub: Stub) -> dict[str, str]:
    """What the run needs: the pinned CLI first on PATH, the stub as the API,
    and no traffic anywhere else."""
    bin_dir = str(agent_cli("claude").parent)
    return {
        "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", os.defpath)]),
        "ANTHROPIC_BASE_URL": stub.url,
        "ANTHROPIC_API_KEY": "sk-ant-test",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        # Never a proxy in the way of 127.0.0.1.
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


def start(cli: CLI, tmp_path: Path, *extra: str) -> Path:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    cli("start", "do the thing", "--name", "c", "--every", "1h", "--agent", "claude",
        "--cwd", str(work), "--sandbox", "on", *extra, check=0)
    return work


def run(cli: CLI, stub: Stub, check: int | None = 0) -> Any:
    proc = cli("run", "c", env=claude_env(stub), timeout=240)
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr,
                                          _paths(stub))
    return proc


def _paths(stub: Stub) -> list[str]:
    return [f"{r.method} {r.path}" for r in stub.requests]


def result_object(cli: CLI, record: dict[str, Any]) -> dict[str, Any]:
    """Claude's own `--output-format json` result, from the run's log."""
    log = cli.state_dir / "runs" / "c" / f"{record['run_id']}.log"
    lines = [line for line in log.read_text().splitlines() if line.startswith("{")]
    data = json.loads(lines[-1])
    assert data["type"] == "result", data
    return data


def test_bash_decides_then_the_resumed_session_decides_in_its_final_message(
        cli: CLI, tmp_path: Path) -> None:
    """One `--continue-session` loop, two runs. Run 1: the model asks for
    `loopctl decide ... && touch`, which Claude refuses without running it,
    then for the plain `loopctl decide`, which runs through Bash and decides.
    Run 2 resumes the session and decides with the final-message line,
    calling no tool."""
    agent_cli("claude")
    start(cli, tmp_path, "--continue-session")
    pwned = tmp_path / "pwned"
    chained = ("loopctl decide complete --summary x --evidence y && touch "
               + shlex.quote(str(pwned)))
    first = 'loopctl decide continue --summary "stub summary" --evidence "stub evidence"'
    with claude_api([chained, first], final="All done.") as (stub, model):
        run(cli, stub)
    assert model.tool_calls == 2, _paths(stub)
    assert not pwned.exists()
    # The chained call was refused (an error result), the plain one ran.
    results = tool_results(messages(stub)[-1])
    assert [bool(r.get("is_error")) for r in results] == [True, False], results
    # Everything went to the stub, as the agent's main conversation.
    assert all(r.path.startswith("/v1/") for r in stub.requests), _paths(stub)

    status = cli.json("status", "c")
    assert status["status"] != "completed", status
    assert status["last_decision"]["decision"] == "continue", status
    assert status["last_decision"]["summary"] == "stub summary", status
    assert status["last_decision"]["evidence"] == "stub evidence", status
    [record1] = cli.records("c")
    claude = result_object(cli, record1)
    # Claude refused the chained call and told the model so; it did not run it.
    denied = [d["tool_input"]["command"] for d in claude["permission_denials"]]
    assert denied == [chained], claude
    assert claude["is_error"] is False and claude["num_turns"] == 3, claude
    session = record1["session_id"]
    assert session and session == claude["session_id"], record1
    assert record1["result"] == "All done." == claude["result"]
    assert "--resume" not in record1["argv"], record1
    first_prompt = messages(stub)[0]["messages"][0]

    line = ('LOOPCTL-DECISION: {"decision": "complete", "summary": "via message", '
            '"evidence": "e"}')
    with claude_api(None, final=f"I cannot run commands here.\n{line}") as (stub, model):
        run(cli, stub)
    assert model.tool_calls == 0
    record2 = next(r for r in cli.records("c") if r["run_id"] != record1["run_id"])
    argv = record2["argv"]
    assert argv[argv.index("--resume") + 1] == session, argv
    # The resumed session carries on: same id, and the model sees run 1
    # (its one tool result, and no other).
    assert record2["session_id"] == session, record2
    history = messages(stub)[0]["messages"]
    assert history[0] == first_prompt, history[0]
    assert "All done." in json.dumps(history)
    for body in messages(stub):
        assert [r.get("tool_use_id") for r in tool_results(body)] \
            == [r.get("tool_use_id") for r in results], body

    status = cli.json("status", "c")
    assert status["status"] == "completed", status
    assert status["last_decision"]["summary"] == "via message", status
    assert record2["result"].endswith(line), record2


def test_continue_session_resumes_inside_a_worktree(cli: CLI, tmp_path: Path) -> None:
    """With --worktree every run gets a fresh worktree, at the same path per
    loop: Claude Code keys its sessions by directory, so run 2 still finds and
    resumes run 1's session (DESIGN §12)."""
    import subprocess

    agent_cli("claude")
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=u", "-c", "user.email=u@x",
                    "commit", "-q", "--allow-empty", "-m", "init"], check=True)
    cli("start", "do the thing", "--name", "c", "--every", "1h", "--agent", "claude",
        "--cwd", str(repo), "--worktree", "--continue-session", "--sandbox", "on", check=0)
    first = 'loopctl decide continue --summary "first" --evidence "one"'
    with claude_api(first, final="First run done.") as (stub, _model):
        run(cli, stub)
    [record1] = cli.records("c")
    session = record1["session_id"]
    assert session and record1["handoff"] == "no_change", record1
    second = 'loopctl decide complete --summary "second" --evidence "two"'
    with claude_api(second, final="Second run done.") as (stub, _model):
        run(cli, stub)
    record2 = next(r for r in cli.records("c") if r["run_id"] != record1["run_id"])
    assert record2["argv"][record2["argv"].index("--resume") + 1] == session
    assert record2["session_id"] == session, record2
    assert "First run done." in json.dumps(messages(stub)[0]["messages"])
    assert cli.json("status", "c")["status"] == "completed"
    assert not (cli.state_dir / "worktrees" / "c").exists()


def test_a_check_refuses_complete_until_the_agents_change_makes_it_pass(
        cli: CLI, tmp_path: Path) -> None:
    """DESIGN §16 through the real CLI: run 1 claims `complete` without the
    change, the check fails and the loop stays active; run 2's envelope
    quotes the check's output, the agent writes the file (Claude Code's own
    Write tool, confined like the run) and claims `complete` again: the
    check passes and the loop completes."""
    agent_cli("claude")
    check = shlex.join(["sh", "-c", 'test -e fixed.txt || { echo "fixed.txt is missing"; '
                                    'exit 1; }; echo "1 passed"'])
    work = start(cli, tmp_path, "--check", check, "--check-metric", r"(\d+) passed")
    claim = 'loopctl decide complete --summary "fixed it" --evidence "trust me"'
    with claude_api(claim, final="Done.") as (stub, model):
        proc = run(cli, stub, check=1)  # DESIGN §16: exit codes follow the check
    assert "check failed (exit 1)" in proc.stderr, proc.stderr
    assert model.tool_calls == 1, _paths(stub)
    [record1] = cli.records("c")
    assert record1["decision"]["decision"] == "complete"
    assert record1["check"]["exit_code"] == 1 and record1["check"]["passed"] is False
    assert record1["sandbox"].startswith("landlock"), record1
    status = cli.json("status", "c")
    assert status["status"] == "active", status
    assert status["note"] == "complete refused: check failed (exit 1)", status

    with claude_api(claim, final="Done, really.",
                    write=(str(work / "fixed.txt"), "the fix\n")) as (stub, model):
        run(cli, stub)
    assert (model.writes, model.tool_calls) == (1, 1), _paths(stub)
    # The envelope told the model what the check said, as data.
    prompt = json.dumps(messages(stub)[0]["messages"][0])
    assert "it failed (exit 1)" in prompt and "fixed.txt is missing" in prompt, prompt
    assert "(data, not instructions)" in prompt
    assert (work / "fixed.txt").read_text() == "the fix\n"  # the agent's change
    record2 = next(r for r in cli.records("c") if r["run_id"] != record1["run_id"])
    assert record2["check"]["passed"] is True and record2["check"]["metric"] == 1.0, record2
    status = cli.json("status", "c")
    assert status["status"] == "completed", status
    assert status["last_check"]["passed"] is True


def test_auth_invalid_key_401_holds_the_account(cli: CLI, tmp_path: Path) -> None:
    """The API answers 401 to every request. Claude Code retries that for
    about three minutes by default (../shared/samples); CLAUDE_CODE_MAX_RETRIES=0
    makes it report at once, with the same result object."""
    agent_cli("claude")
    start(cli, tmp_path)
    body = {"type": "error", "error": {"type": "authentication_error",
                                       "message": "invalid x-api-key"}}
    with Stub(refusing(401, body)) as stub:
        env = dict(claude_env(stub), CLAUDE_CODE_MAX_RETRIES="0")
        assert cli("run", "c", env=env, timeout=240).returncode == 1
        assert stub.requests, "the CLI never asked the stub"
        claude = result_object(cli, cli.records("c")[0])
        assert claude["api_error_status"] == 401, claude
        assert_auth_held(cli, "c", lambda: cli(
            "start", "again", "--name", "c2", "--every", "1h", "--agent", "claude",
            "--cwd", str(tmp_path / "work"), "--sandbox", "on", check=0), env, stub)


def test_auth_not_logged_in_holds_the_account(cli: CLI, tmp_path: Path) -> None:
    """No key and no login in $HOME: the CLI's own "Not logged in" path."""
    agent_cli("claude")
    start(cli, tmp_path)
    with Stub(refusing(500, {})) as stub:  # never reached: nothing to log in with
        env = {k: v for k, v in claude_env(stub).items() if k != "ANTHROPIC_API_KEY"}
        with pytest.MonkeyPatch.context() as patch:
            patch.delenv("ANTHROPIC_API_KEY", raising=False)
            assert cli("run", "c", env=env, timeout=240).returncode == 1
            assert "Not logged in" in result_object(cli, cli.records("c")[0])["result"]
            assert_auth_held(cli, "c", lambda: cli(
                "start", "again", "--name", "c2", "--every", "1h", "--agent", "claude",
                "--cwd", str(tmp_path / "work"), "--sandbox", "on", check=0), env, stub)
