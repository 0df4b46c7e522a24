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

from e2e.common import agent_cli, assert_auth_held, refusing
from e2e.gemini_stub import GeminiModel, gemini_api, stream_requests

pytestmark = pytest.mark.slow


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
    return cli("run", "g", env=env, timeout=240)


def printed_session(record: dict[str, Any]) -> str:
    """The session id in the CLI's own JSON output (the run's log)."""
    text = Path(record["log"]).read_text()
    start = text.index("{\n")
    data, _ = json.JSONDecoder().raw_decode(text[start:])
    return data["session_id"]


def status(cli: Any) -> dict[str, Any]:
    return cli.json("status", "g")


def test_a_refused_chain_a_tool_call_then_a_resumed_final_message_decide(
        cli: Any, gemini: Path, tmp_path: Path) -> None:
    """One `--continue-session` loop, two runs (each CLI start costs ~2.5 s of
    CPU). Run 1: the model asks for `loopctl decide ... && touch`, which the
    CLI refuses without running it, then for `run_shell_command(loopctl
    decide)`, which decides. Run 2 resumes the session and decides with the
    final-message line, calling no tool."""
    start(cli, tmp_path, "--continue-session")
    pwned = tmp_path / "pwned"
    chained = f"loopctl decide complete --summary x --evidence y && touch {pwned}"
    model = GeminiModel([chained, 'loopctl decide continue --summary "stub summary" '
                                  '--evidence "stub evidence"'], final="stub final text")
    with gemini_api(model, Path(os.environ["HOME"])) as (server, env):
        proc = run(cli, gemini, env)
        assert proc.returncode == 0, (proc.stdout, proc.stderr)
        # The CLI got the chained call and answered it with a refusal, not an output.
        assert len(model.tool_responses) == 2, (model.tool_responses, proc.stdout, proc.stderr)
        refused, ran = (json.dumps(r) for r in model.tool_responses)
        assert "denied by policy" in refused and "decision recorded" not in refused
        assert not pwned.exists()
        # The shell tool really ran the shim: its output went back to the model.
        assert "decision recorded: continue" in ran
        info = status(cli)
        assert info["status"] != "completed" and info["last_decision"]["decision"] == "continue"
        assert info["last_decision"]["summary"] == "stub summary"
        assert info["last_decision"]["evidence"] == "stub evidence"
        [first] = cli.records("g")
        session = first["session_id"]
        assert session and session == printed_session(first)
        assert first["result"] == "stub final text"
        assert "do the thing" in json.dumps(stream_requests(server)[0])
        sent_before = len(stream_requests(server))
        responses_before = len(model.tool_responses)

        line = json.dumps({"decision": "complete", "summary": "via message", "evidence": "e"})
        model.commands, model.final = [], f"All done.\nLOOPCTL-DECISION: {line}"
        proc = run(cli, gemini, env)
        assert proc.returncode == 0, (proc.stdout, proc.stderr)
        assert len(model.tool_responses) == responses_before  # no tool call in run 2
        second = [r for r in cli.records("g") if r["run_id"] != first["run_id"]][0]
        argv = second["argv"]
        assert argv[argv.index("--resume") + 1] == session
        # The resumed conversation carries the first run's exchange.
        resumed = json.dumps(stream_requests(server)[sent_before])
        assert "stub summary" in resumed and "stub final text" in resumed
    info = status(cli)
    assert info["status"] == "completed", info
    assert info["last_decision"]["summary"] == "via message"
    assert second["session_id"] == session
    assert second["result"].endswith(f"LOOPCTL-DECISION: {line}")


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
