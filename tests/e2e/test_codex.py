"""The `codex` preset against the real Codex CLI (pinned in
tests/e2e/common.py), whose model is a local stub of the OpenAI Responses API
(tests/e2e/codex_stub.py). Only 127.0.0.1 is contacted.

Each test runs loopctl as a user would (`start`, then `run` in the
foreground) and checks that the decision protocol works through Codex's
real tool loop confined by loopctl (`--sandbox on`: Landlock, in which
codex's own sandbox cannot start, so the preset swaps it for
danger-full-access) and, once, unconfined in the preset's workspace-write
sandbox: `loopctl decide` through the shell tool (run with `bash -c`, the
decision folder granted by writable_roots), the final-message line, and
`--continue-session`.

There is no chained-command test: the preset sets no Codex command rule (no
`.rules` prefix allowance); its guard is the sandbox, which confines every
command alike, chained or not.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from conftest import CLI
from e2e.codex_stub import KEY, KEY_ENV, CodexModel, Turn, codex_model, install
from e2e.common import Stub, agent_cli, assert_auth_held, refusing

pytestmark = pytest.mark.slow

DECIDE = 'loopctl decide {} --summary "{}" --evidence "{}"'


@pytest.fixture(autouse=True)
def _codex_home(monkeypatch: pytest.MonkeyPatch) -> None:
    # Codex must read the test's ~/.codex/config.toml, never another one.
    monkeypatch.delenv("CODEX_HOME", raising=False)


def codex_env() -> dict[str, str]:
    """The pinned CLI first on PATH, the stub's key, no proxy for 127.0.0.1."""
    bin_dir = str(agent_cli("codex").parent)
    return {"PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", os.defpath)]),
            KEY_ENV: KEY, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


def start(cli: CLI, tmp_path: Path, *extra: str) -> None:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    cli("start", "do the thing", "--name", "x", "--every", "1h", "--agent", "codex",
        "--cwd", str(work), "--timeout", "180s", "--sandbox", "on", *extra, env=codex_env(),
        check=0)


def run(cli: CLI, model: CodexModel) -> None:
    proc = cli("run", "x", env=codex_env(), timeout=240)
    assert (proc.returncode, model.errors) == (0, []), (proc.stdout, proc.stderr)


def log_events(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Codex's `--json` events in the run's log."""
    out = []
    for line in Path(record["log"]).read_text().splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def thread_started(record: dict[str, Any]) -> str:
    return next(e["thread_id"] for e in log_events(record) if e["type"] == "thread.started")


def commands_run(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [e["item"] for e in log_events(record) if e["type"] == "item.completed"
            and e["item"].get("type") == "command_execution"]


def assert_sandboxed(model: CodexModel, mode: str = "danger-full-access") -> None:
    """Every request came from a confined run, with the stub's key. Inside
    loopctl's sandbox (`--sandbox on`) codex 0.171's own cannot start (its
    bubblewrap needs mount(2), which Landlock denies), so the preset swaps
    it for danger-full-access and loopctl's Landlock bounds the commands."""
    assert model.calls
    for call in model.calls:
        assert call.metadata.get("sandbox_mode") == mode, call.metadata
        assert call.headers.get("authorization") == f"Bearer {KEY}"


def test_decide_through_the_shell_tool(cli: CLI, tmp_path: Path) -> None:
    start(cli, tmp_path)
    command = DECIDE.format("complete", "stub summary", "stub evidence")
    with codex_model(Path(os.environ["HOME"]), Turn("All done.", command=command)) as model:
        run(cli, model)
    [record] = cli.records("x")
    # The command ran without a login shell and succeeded in the sandbox.
    [ran] = commands_run(record)
    assert ran["command"].startswith("/bin/bash -c "), ran["command"]
    assert command in ran["command"]
    assert ran["exit_code"] == 0, ran["aggregated_output"]
    assert len(model.outputs) == 1 and "exited with code 0" in model.outputs[0], model.outputs
    assert record["sandbox"].startswith("landlock ABI ")
    assert record["argv"][2:4] == ["--sandbox", "danger-full-access"], record["argv"]
    status = cli.json("status", "x")
    assert status["status"] == "completed"
    assert status["last_decision"]["summary"] == "stub summary"
    assert status["last_decision"]["evidence"] == "stub evidence"
    thread = thread_started(record)
    assert record["session_id"] == thread
    assert record["result"] == "All done."
    assert record["decision"]["decision"] == "complete"
    # The prompt, envelope included, reached the model.
    assert any("do the thing" in t and "loopctl decide complete" in t
               for t in model.calls[0].texts())
    assert_sandboxed(model)
    assert {c.metadata.get("thread_id") for c in model.calls} == {thread}


def test_unconfined_codex_keeps_its_own_sandbox(cli: CLI, tmp_path: Path) -> None:
    """`--sandbox off`: codex's workspace-write sandbox runs the command."""
    start(cli, tmp_path, "--sandbox", "off")
    command = DECIDE.format("complete", "own sandbox", "e")
    with codex_model(Path(os.environ["HOME"]), Turn("All done.", command=command)) as model:
        run(cli, model)
    [record] = cli.records("x")
    [ran] = commands_run(record)
    assert ran["exit_code"] == 0, ran["aggregated_output"]
    assert record["sandbox"] == "off" and "workspace-write" in record["argv"]
    assert cli.json("status", "x")["last_decision"]["summary"] == "own sandbox"
    assert_sandboxed(model, "workspace-write")


def test_decision_line_in_the_final_message(cli: CLI, tmp_path: Path) -> None:
    start(cli, tmp_path)
    final = ('I could not run commands.\nLOOPCTL-DECISION: {"decision": "complete", '
             '"summary": "via message", "evidence": "e"}')
    with codex_model(Path(os.environ["HOME"]), Turn(final)) as model:
        run(cli, model)
    status = cli.json("status", "x")
    assert status["status"] == "completed"
    assert status["last_decision"]["summary"] == "via message"
    assert status["last_decision"]["evidence"] == "e"
    [record] = cli.records("x")
    assert record["result"] == final
    assert commands_run(record) == [] and model.outputs == []
    assert len(model.calls) == 1
    assert_sandboxed(model)


def test_continue_session_resumes_the_thread(cli: CLI, tmp_path: Path) -> None:
    start(cli, tmp_path, "--continue-session")
    turns = (Turn("First pass done.", command=DECIDE.format("continue", "first", "e1")),
             Turn("Second pass done.", command=DECIDE.format("complete", "second", "e2")))
    with codex_model(Path(os.environ["HOME"]), *turns) as model:
        run(cli, model)
        [first] = cli.records("x")
        assert [r["exit_code"] for r in commands_run(first)] == [0], commands_run(first)
        status = cli.json("status", "x")
        assert status["status"] == "active"
        assert status["last_decision"]["decision"] == "continue"
        thread = first["session_id"]
        assert thread and thread == thread_started(first)
        assert "resume" not in first["argv"]
        first_calls = len(model.calls)

        run(cli, model)
    status = cli.json("status", "x")
    assert status["status"] == "completed"
    assert status["last_decision"]["summary"] == "second"
    first, second = cli.records("x")
    argv = second["argv"]
    at = argv.index("resume")
    assert argv[at + 1] == thread
    after = argv[at + 2:]
    options = [after[i + 1] for i, a in enumerate(after) if a == "-c"]
    assert options[0] == "allow_login_shell=false", argv
    assert options[1].startswith("sandbox_workspace_write.writable_roots=["), argv
    assert len(options) == 2 and after[-1] == "-", argv
    assert second["session_id"] == thread
    assert second["result"] == "Second pass done."
    # The second run continued the same conversation: same thread, and the
    # first run's exchange is in its history.
    later = model.calls[first_calls:]
    assert later and {c.metadata.get("thread_id") for c in later} == {thread}
    assert "First pass done." in later[0].texts()
    assert any(i.get("type") == "function_call_output" for i in later[0].input)
    [ran] = commands_run(second)
    assert ran["exit_code"] == 0, ran["aggregated_output"]
    assert_sandboxed(model)


def test_auth_invalid_key_401_holds_the_account(cli: CLI, tmp_path: Path) -> None:
    """The provider answers 401: codex reports `turn.failed` at once (the
    stub's config sets no retries; codex does not retry a 401 anyway)."""
    start(cli, tmp_path)
    body = {"error": {"message": "Incorrect API key provided: stub-key.",
                      "type": "invalid_request_error", "param": None,
                      "code": "invalid_api_key"}}
    with Stub(refusing(401, body)) as stub:
        install(Path(os.environ["HOME"]), stub.url)
        env = codex_env()
        assert cli("run", "x", env=env, timeout=240).returncode == 1
        assert stub.requests, "the CLI never asked the stub"
        failed = [e for e in log_events(cli.records("x")[0]) if e["type"] == "turn.failed"]
        assert "401" in failed[0]["error"]["message"], failed
        work = tmp_path / "work"
        assert_auth_held(cli, "x", lambda: cli(
            "start", "again", "--name", "x2", "--every", "1h", "--agent", "codex",
            "--cwd", str(work), "--sandbox", "on", env=env, check=0), env, stub)
