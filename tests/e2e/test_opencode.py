"""The `opencode` preset against the real OpenCode CLI (pinned in
tests/e2e/common.py), whose model is a local OpenAI-compatible stub
(tests/e2e/opencode_stub.py) configured as a custom provider. Only 127.0.0.1
is contacted.

The test runs loopctl as a user would (`start`, then `run` in the
foreground) and checks that the decision protocol works through opencode's
real tool loop: `loopctl decide` via its shell tool, the final-message line,
and `--continue-session` (`--session <id>`), in one loop of two runs. There
is no refused-command test: opencode allows shell commands by default, so
there is no rule to refuse one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from conftest import CLI
from e2e.common import Stub, agent_cli, assert_auth_held, refusing
from e2e.opencode_stub import (
    MODEL_ID,
    opencode_api,
    opencode_env,
    stray_requests,
    tool_results,
)

pytestmark = pytest.mark.slow


def env_for(stub: Stub, tmp_path: Path) -> dict[str, str]:
    """The pinned CLI first on PATH, the stub as the only provider."""
    bin_dir = str(agent_cli("opencode").parent)
    # The stub's config is outside the working directory: granted read
    # with --sandbox-read at start, as a user would for a config of theirs.
    env = opencode_env(stub, tmp_path / "config")
    env["PATH"] = os.pathsep.join([bin_dir, os.environ.get("PATH", os.defpath)])
    return env


def start(cli: CLI, tmp_path: Path, *extra: str) -> None:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (tmp_path / "config").mkdir(exist_ok=True)
    cli("start", "do the thing", "--name", "o", "--every", "1h", "--agent", "opencode",
        "--model", MODEL_ID, "--cwd", str(work), "--timeout", "180s", "--sandbox", "on",
        "--sandbox-read", str(tmp_path / "config"), *extra, check=0)


def run(cli: CLI, stub: Stub, tmp_path: Path) -> Any:
    proc = cli("run", "o", env=env_for(stub, tmp_path), timeout=240)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr,
                                  [f"{r.method} {r.path}" for r in stub.requests])
    # Everything opencode asked for was the model, or npm's registry (the
    # background plugin install, answered 404).
    assert not stray_requests(stub), stray_requests(stub)
    return proc


def opencode_events(cli: CLI, record: dict[str, Any]) -> list[dict[str, Any]]:
    """opencode's own `--format json` events, from the run's log."""
    log = cli.state_dir / "runs" / "o" / f"{record['run_id']}.log"
    return [json.loads(line) for line in log.read_text().splitlines()
            if line.startswith("{")]


def test_shell_tool_decides_then_the_resumed_session_decides_in_its_final_message(
        cli: CLI, tmp_path: Path) -> None:
    """One `--continue-session` loop, two runs (each opencode start costs ~5 s
    of CPU): run 1 decides through the shell tool, run 2 resumes the session
    and decides with the final-message line, calling no tool."""
    agent_cli("opencode")
    start(cli, tmp_path, "--continue-session")
    first = 'loopctl decide continue --summary "stub summary" --evidence "stub evidence"'
    with opencode_api(first, final="All done.") as (stub, model):
        run(cli, stub, tmp_path)
    assert model.tool_calls == 1
    # The tool really ran `loopctl decide`: its output went back to the model.
    assert tool_results(model.conversations[-1]) == ["decision recorded: continue\n"]

    status = cli.json("status", "o")
    assert status["status"] != "completed", status
    assert status["last_decision"]["decision"] == "continue", status
    assert status["last_decision"]["summary"] == "stub summary", status
    assert status["last_decision"]["evidence"] == "stub evidence", status

    [record1] = cli.records("o")
    events = opencode_events(cli, record1)
    [tool] = [e["part"] for e in events if e["type"] == "tool_use"]
    assert tool["state"]["status"] == "completed", tool
    assert tool["state"]["input"]["command"] == first, tool
    sessions = {e["sessionID"] for e in events}
    session = record1["session_id"]
    assert len(sessions) == 1 and session == sessions.pop(), record1
    assert session.startswith("ses_"), record1
    assert record1["result"] == "All done.", record1
    argv1 = record1["argv"]
    assert "--session" not in argv1, argv1
    assert argv1[-2:] == ["--", argv1[-1]], argv1
    assert argv1[argv1.index("-m") + 1] == MODEL_ID, argv1

    line = ('LOOPCTL-DECISION: {"decision": "complete", "summary": "via message", '
            '"evidence": "e"}')
    with opencode_api(None, final=f"I cannot run commands here.\n{line}") as (stub, model):
        run(cli, stub, tmp_path)
    assert model.tool_calls == 0
    record2 = next(r for r in cli.records("o") if r["run_id"] != record1["run_id"])
    argv = record2["argv"]
    assert argv[argv.index("--session") + 1] == session, argv
    # The same session carries on, and the model sees run 1's conversation:
    # its one tool result, and no other.
    assert record2["session_id"] == session, record2
    history = model.conversations[0]["messages"]
    assert "All done." in json.dumps(history), history
    assert len([m for m in history if m.get("role") == "user"]) == 2, history
    for body in model.conversations:
        assert tool_results(body) == ["decision recorded: continue\n"], body

    status = cli.json("status", "o")
    assert status["status"] == "completed", status
    assert status["last_decision"]["summary"] == "via message", status
    assert record2["result"].endswith(line), record2


def test_auth_invalid_key_401_holds_the_account(cli: CLI, tmp_path: Path) -> None:
    """The provider refuses the key (401): opencode's error event says so."""
    start(cli, tmp_path)
    body = {"error": {"message": "Incorrect API key provided: stub-key.",
                      "type": "invalid_request_error", "param": None,
                      "code": "invalid_api_key"}}
    with Stub(refusing(401, body)) as stub:
        env = env_for(stub, tmp_path)
        assert cli("run", "o", env=env, timeout=240).returncode == 1
        assert stub.requests, "the CLI never asked the stub"
        assert_auth_held(cli, "o", lambda: cli(
            "start", "again", "--name", "o2", "--every", "1h", "--agent", "opencode",
            "--model", MODEL_ID, "--cwd", str(tmp_path / "work"), "--sandbox", "on",
            "--sandbox-read", str(tmp_path / "config"), check=0), env, stub)
