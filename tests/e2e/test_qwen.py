"""The `qwen` preset against the real Qwen Code CLI, with a local OpenAI
chat-completions stub as the model: the decision reaches loopctl through
`run_shell_command(loopctl decide)` and through the final message; chained
commands are refused."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from e2e.common import agent_cli, assert_auth_held, refusing
from e2e.qwen_stub import QwenModel, chat_requests, qwen_api

pytestmark = pytest.mark.slow

DECIDE = 'loopctl decide complete --summary "stub summary" --evidence "stub evidence"'


@pytest.fixture
def qwen() -> Path:
    return agent_cli("qwen")


def start(cli: Any, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    cli("start", "do the thing", "--name", "q", "--every", "1h", "--agent", "qwen",
        "--cwd", str(work), "--sandbox", "on", check=0)


def run(cli: Any, qwen: Path, api_env: dict[str, str]) -> Any:
    env = dict(api_env, PATH=os.pathsep.join([str(qwen.parent), os.environ["PATH"]]))
    return cli("run", "q", env=env, timeout=240)


def printed_result(record: dict[str, Any]) -> dict[str, Any]:
    """The result message in the CLI's own JSON output (the run's log)."""
    decoder = json.JSONDecoder()
    for line in reversed(Path(record["log"]).read_text().splitlines()):
        if line.startswith("["):
            messages, _ = decoder.raw_decode(line)
            return next(m for m in messages if m.get("type") == "result")
    raise AssertionError("no JSON output in the run's log")


def status(cli: Any) -> dict[str, Any]:
    return cli.json("status", "q")


def test_a_chained_command_is_refused_and_the_plain_decide_then_runs(
        cli: Any, qwen: Path, tmp_path: Path) -> None:
    """One run (each Qwen Code start costs ~3 s of CPU): the model first asks
    for `loopctl decide ... && touch`, which the CLI refuses without running
    it, then for the plain `loopctl decide`, which runs and decides."""
    start(cli, tmp_path)
    pwned = tmp_path / "pwned"
    chained = f"loopctl decide complete --summary x --evidence y && touch {pwned}"
    model = QwenModel([chained, DECIDE], final="stub final text")
    with qwen_api(model) as (server, env):
        proc = run(cli, qwen, env)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    # The CLI got the chained call and answered it with a refusal, not an output.
    assert len(model.tool_results) == 2, (model.tool_results, proc.stdout, proc.stderr)
    refused, ran = (json.dumps(r) for r in model.tool_results)
    assert "permission was declined" in refused and "decision recorded" not in refused
    assert not pwned.exists()
    # The shell tool really ran the shim: its output went back to the model.
    assert "decision recorded: complete" in ran
    info = status(cli)
    assert info["status"] == "completed", info
    assert info["last_decision"]["summary"] == "stub summary"
    assert info["last_decision"]["evidence"] == "stub evidence"
    [record] = cli.records("q")
    printed = printed_result(record)
    assert record["session_id"] and record["session_id"] == printed["session_id"]
    assert record["result"] == printed["result"] == "stub final text"
    assert "do the thing" in json.dumps(chat_requests(server)[0]["messages"])


def test_final_message_decides(cli: Any, qwen: Path, tmp_path: Path) -> None:
    start(cli, tmp_path)
    line = json.dumps({"decision": "complete", "summary": "via message", "evidence": "e"})
    model = QwenModel(None, final=f"All done.\nLOOPCTL-DECISION: {line}")
    with qwen_api(model) as (_server, env):
        proc = run(cli, qwen, env)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert model.tool_results == []
    info = status(cli)
    assert info["status"] == "completed", info
    assert info["last_decision"]["summary"] == "via message"
    [record] = cli.records("q")
    assert record["result"].endswith(f"LOOPCTL-DECISION: {line}")


def test_auth_invalid_key_401_holds_the_account(cli: Any, qwen: Path, tmp_path: Path) -> None:
    """The OpenAI-compatible API refuses the key (401)."""
    start(cli, tmp_path)
    body = {"error": {"message": "Incorrect API key provided: stub-key.",
                      "type": "invalid_request_error", "param": None,
                      "code": "invalid_api_key"}}
    with qwen_api(refusing(401, body)) as (server, api_env):  # type: ignore[arg-type]
        env = dict(api_env, PATH=os.pathsep.join([str(qwen.parent), os.environ["PATH"]]))
        assert run(cli, qwen, api_env).returncode == 1
        assert server.requests, "the CLI never asked the stub"
        assert_auth_held(cli, "q", lambda: cli(
            "start", "again", "--name", "q2", "--every", "1h", "--agent", "qwen",
            "--cwd", str(tmp_path / "work"), "--sandbox", "on", check=0), env, server)
