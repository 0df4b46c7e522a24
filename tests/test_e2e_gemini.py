"""The `gemini` preset against the real Gemini CLI, with a local stub as the
model: the decision reaches loopctl through `run_shell_command(loopctl
decide)` and through the final message; chained commands are refused;
`--continue-session` resumes the CLI's session."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from e2e.common import agent_cli, assert_auth_held, assert_undecided, refusing
from e2e.gemini_stub import GeminiModel, gemini_api, stream_requests

pytestmark = pytest.mark.slow

DECIDE = 'loopctl decide complete --summary "stub summary" --evidence "stub evidence"'


@pytest.fixture
def gemini() -> Path:
    return agent_cli("gemini")


def start(cli: Any, tmp_path: Path, *extra: str) -> None:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    cli("start", "do the thing", "--name", "g", "--every", "1h", "--agent", "gemini",
        "--cwd", str(work), "--sandbox", "on", *extra, check=0)


def run(cli: Any, gemini: Path, api_env: dict[str, str]) -> Any:
    env = dict(api_env, PATH=os.pathsep.join([str(gemini.parent), os.environ["PATH"]]))
    return cli("run", "g", env=env, timeout=60)


def printed_session(record: dict[str, Any]) -> str:
    """The session id in the CLI's own JSON output (the run's log)."""
    text = Path(record["log"]).read_text()
    start = text.index("{\n")
    data, _ = json.JSONDecoder().raw_decode(text[start:])
    return data["session_id"]


def status(cli: Any) -> dict[str, Any]:
    return cli.json("status", "g")


def test_tool_call_decides(cli: Any, gemini: Path, tmp_path: Path) -> None:
    start(cli, tmp_path)
    model = GeminiModel(DECIDE, final="stub final text")
    with gemini_api(model, Path(os.environ["HOME"])) as (server, env):
        proc = run(cli, gemini, env)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    # The shell tool really ran the shim: its output went back to the model.
    assert "decision recorded: complete" in json.dumps(model.tool_responses)
    info = status(cli)
    assert info["status"] == "completed", info
    assert info["last_decision"]["summary"] == "stub summary"
    assert info["last_decision"]["evidence"] == "stub evidence"
    [record] = cli.records("g")
    assert record["session_id"] and record["session_id"] == printed_session(record)
    assert record["result"] == "stub final text"
    assert "do the thing" in json.dumps(stream_requests(server)[0])


def test_chained_command_refused(cli: Any, gemini: Path, tmp_path: Path) -> None:
    start(cli, tmp_path)
    pwned = tmp_path / "pwned"
    model = GeminiModel(f"loopctl decide complete --summary x --evidence y && touch {pwned}",
                        final="I could not run that.")
    with gemini_api(model, Path(os.environ["HOME"])) as (server, env):
        proc = run(cli, gemini, env)
    # The CLI got the call and answered it with a refusal, not an output.
    assert len(model.tool_responses) == 1, (model.tool_responses, proc.stdout, proc.stderr)
    assert "denied by policy" in json.dumps(model.tool_responses)
    assert "decision recorded" not in json.dumps(model.tool_responses)
    assert not pwned.exists()
    assert_undecided(cli, "g", "I could not run that.")


def test_final_message_decides(cli: Any, gemini: Path, tmp_path: Path) -> None:
    start(cli, tmp_path)
    line = json.dumps({"decision": "complete", "summary": "via message", "evidence": "e"})
    model = GeminiModel(None, final=f"All done.\nLOOPCTL-DECISION: {line}")
    with gemini_api(model, Path(os.environ["HOME"])) as (_server, env):
        proc = run(cli, gemini, env)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert model.tool_responses == []
    info = status(cli)
    assert info["status"] == "completed", info
    assert info["last_decision"]["summary"] == "via message"


def test_continue_session_resumes(cli: Any, gemini: Path, tmp_path: Path) -> None:
    start(cli, tmp_path, "--continue-session")
    model = GeminiModel('loopctl decide continue --summary "first half" --evidence "e1"',
                        final="first run done")
    with gemini_api(model, Path(os.environ["HOME"])) as (server, env):
        assert run(cli, gemini, env).returncode == 0
        info = status(cli)
        assert info["status"] != "completed" and info["last_decision"]["decision"] == "continue"
        [first] = cli.records("g")
        session = first["session_id"]
        assert session and session == printed_session(first)
        sent_before = len(stream_requests(server))

        model.command, model.final = DECIDE, "second run done"
        proc = run(cli, gemini, env)
        assert proc.returncode == 0, (proc.stdout, proc.stderr)
        second = [r for r in cli.records("g") if r["run_id"] != first["run_id"]][0]
        argv = second["argv"]
        assert argv[argv.index("--resume") + 1] == session
        # The resumed conversation carries the first run's exchange.
        resumed = json.dumps(stream_requests(server)[sent_before])
        assert "first half" in resumed and "first run done" in resumed
    info = status(cli)
    assert info["status"] == "completed", info
    assert info["last_decision"]["summary"] == "stub summary"
    assert second["session_id"] == session


def test_auth_invalid_key_401_holds_the_account(cli: Any, gemini: Path, tmp_path: Path) -> None:
    """The API refuses the key (401 UNAUTHENTICATED): gemini gives up at once."""
    start(cli, tmp_path)
    body = {"error": {"code": 401, "message": "API key not valid. Please pass a valid API key.",
                      "status": "UNAUTHENTICATED"}}
    with gemini_api(refusing(401, body), Path(os.environ["HOME"])) as (server, api_env):  # type: ignore[arg-type]
        env = dict(api_env, PATH=os.pathsep.join([str(gemini.parent), os.environ["PATH"]]))
        assert run(cli, gemini, api_env).returncode == 1
        assert server.requests, "the CLI never asked the stub"
        assert_auth_held(cli, "g", lambda: cli(
            "start", "again", "--name", "g2", "--every", "1h", "--agent", "gemini",
            "--cwd", str(tmp_path / "work"), "--sandbox", "on", check=0), env, server)
