"""Helpers shared by the agent tests (tests/agents/test_presets.py,
tests/agents/test_readers.py, tests/agents/test_rate_limits.py): loop definitions for a
preset or a `--command`, the run log's header line, `read()` that reads a log
the way the supervisor does, and constructed sample outputs for every agent
preset, built from each CLI's documented machine-readable format (DESIGN §6).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loopctl.agents.presets import PRESETS, build_argv, read_output
from loopctl.agents.readers import Reading
from loopctl.domain.model import LoopDef, parse_loop
from loopctl.engine.run_context import one_line

PROMPT_PATH = "/tmp/p.txt"
RUN_ID = "RUNID"

ALL = sorted(PRESETS)
AGENTS = [n for n in ALL if n != "shell"]


def make_loop(agent: str = "claude", **raw: Any) -> LoopDef:
    spec: dict[str, Any] = {"prompt": "p", "every": "1h", "agent": agent, "cwd": "/tmp"}
    spec.update(raw)
    return parse_loop("demo", spec)


def command_loop(command: str | list[str], **raw: Any) -> LoopDef:
    spec: dict[str, Any] = {"prompt": "p", "every": "1h", "command": command, "cwd": "/tmp"}
    spec.update(raw)
    return parse_loop("demo", spec)


def log_header(loop: LoopDef, prompt: str) -> bytes:
    """The start line the supervisor writes to every run log (after the agent's
    output since issue 15; before it earlier). Readers must skip it either way."""
    argv, _ = build_argv(loop, prompt, PROMPT_PATH, RUN_ID)
    return (f"# loopctl: run {RUN_ID} of {loop.name} (iteration 1) started "
            f"2026-01-15T10:00:00Z in /tmp: {one_line(argv)}\n").encode()


def assert_reading_types(reading: Reading) -> None:
    assert isinstance(reading, Reading)
    for name in ("result_text", "session_id", "error"):
        value = getattr(reading, name)
        assert value is None or isinstance(value, str), f"{name}={value!r}"
    assert reading.cost_usd is None or isinstance(reading.cost_usd, float)
    assert reading.reset_at is None or isinstance(reading.reset_at, float)
    assert isinstance(reading.is_error, bool)
    assert isinstance(reading.rate_limited, bool)


def read(name: str, output: bytes, exit_code: int | None = 0, *, header: bool = True,
         prompt: str = "do the thing", **raw: Any) -> Reading:
    """Read a run log the way the supervisor does: header line, then the
    output; a small log is both the head and the tail."""
    loop = make_loop(name, **raw)
    log = (log_header(loop, prompt) if header else b"") + output
    reading = read_output(loop, log, log, exit_code)
    assert_reading_types(reading)
    return reading


# -- constructed samples, per preset -------------------------------------------------


def jl(*events: Any) -> bytes:
    return ("\n".join(json.dumps(e) for e in events) + "\n").encode()


def claude_result(result: str | None, *, is_error: bool = False, session: str = "c-sess",
                  cost: float | None = 0.0123, subtype: str = "success",
                  **extra: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"type": "result", "subtype": subtype, "is_error": is_error,
                           "duration_ms": 1200, "num_turns": 1, "session_id": session,
                           "api_error_status": None}
    if result is not None:
        obj["result"] = result
    if cost is not None:
        obj["total_cost_usd"] = cost
    obj.update(extra)
    return obj


def codex_ok(text: str) -> bytes:
    return jl({"type": "thread.started", "thread_id": "0199a213-81c0-7800-8aa1-bbab2a035a53"},
              {"type": "turn.started"},
              {"type": "item.completed", "item": {"id": "item_0", "type": "reasoning",
                                                  "text": "**Looking at the tests**"}},
              {"type": "item.completed", "item": {"id": "item_1", "type": "command_execution",
                                                  "command": "bash -lc 'pytest -q'",
                                                  "aggregated_output": "1 passed",
                                                  "exit_code": 0, "status": "completed"}},
              {"type": "item.completed", "item": {"id": "item_2", "type": "agent_message",
                                                  "text": text}},
              {"type": "turn.completed", "usage": {"input_tokens": 2400,
                                                   "cached_input_tokens": 1024,
                                                   "output_tokens": 120}})


def codex_fail(message: str) -> bytes:
    return jl({"type": "thread.started", "thread_id": "0199a213-81c0-7800-8aa1-bbab2a035a53"},
              {"type": "turn.started"},
              {"type": "error", "message": message},
              {"type": "turn.failed", "error": {"message": message}})


def gemini_out(**obj: Any) -> bytes:
    return (json.dumps({"session_id": "g-sess", **obj}, indent=2) + "\n").encode()


def opencode_ok(text: str) -> bytes:
    sid = "ses_6a1b2c3d4e5fXyZ"
    return jl({"type": "step_start", "timestamp": 1, "sessionID": sid,
               "part": {"type": "step-start"}},
              {"type": "text", "timestamp": 2, "sessionID": sid,
               "part": {"type": "text", "text": "Let me look at the file."}},
              {"type": "tool_use", "timestamp": 3, "sessionID": sid,
               "part": {"type": "tool", "tool": "read", "state": {"status": "completed"}}},
              {"type": "step_finish", "timestamp": 4, "sessionID": sid,
               "part": {"type": "step-finish", "reason": "tool-calls"}},
              {"type": "step_start", "timestamp": 5, "sessionID": sid,
               "part": {"type": "step-start"}},
              {"type": "text", "timestamp": 6, "sessionID": sid,
               "part": {"type": "text", "text": text}},
              {"type": "step_finish", "timestamp": 7, "sessionID": sid,
               "part": {"type": "step-finish", "reason": "stop"}})


def opencode_fail(message: str) -> bytes:
    sid = "ses_6a1b2c3d4e5fXyZ"
    return jl({"type": "step_start", "timestamp": 1, "sessionID": sid,
               "part": {"type": "step-start"}},
              {"type": "error", "timestamp": 2, "sessionID": sid,
               "error": {"message": message}})


def pi_out(text: str, *, stop: str = "stop", error: str | None = None,
           cost: float = 0.01) -> bytes:
    assistant: dict[str, Any] = {"role": "assistant",
                                 "content": [{"type": "text", "text": text}] if text else [],
                                 "usage": {"input": 900, "output": 40,
                                           "cost": {"input": cost / 2, "output": cost / 2,
                                                    "total": cost}},
                                 "stopReason": stop}
    if error is not None:
        assistant["errorMessage"] = error
    return jl({"type": "session", "version": 3, "id": "pi-sess-1",
               "timestamp": "2026-01-15T10:00:00.000Z", "cwd": "/tmp"},
              {"type": "agent_start"},
              {"type": "turn_start"},
              {"type": "agent_end", "messages": [
                  {"role": "user", "content": [{"type": "text", "text": "the prompt"}]},
                  assistant]})


def goose_out(text: str, status: str = "completed", cost: float | None = 0.02) -> bytes:
    meta: dict[str, Any] = {"total_tokens": 1234, "status": status}
    if cost is not None:
        meta["cost_usd"] = cost
    return (json.dumps({"messages": [
        {"role": "user", "content": [{"type": "text", "text": "the prompt"}]},
        {"role": "assistant", "content": [{"type": "text", "text": text}]}],
        "metadata": meta}) + "\n").encode()


def copilot_ok(text: str) -> bytes:
    """Copilot CLI `--output-format json` as it really is: the text is under
    `data.content`; the prompt is echoed as a user.message event."""
    return jl({"type": "session.start", "data": {"sessionId": "cp-sess", "version": 1}},
              {"type": "user.message", "data": {"content": "the prompt says DONE"}},
              {"type": "assistant.message", "data": {"content": "Checking the files.",
                                                     "toolRequests": [{"name": "view"}]}},
              {"type": "tool.execution_complete", "data": {"toolCallId": "c1",
                                                           "success": True}},
              {"type": "assistant.message", "data": {"content": text, "toolRequests": []}},
              {"type": "result", "timestamp": "2026-01-15T10:00:05.000Z",
               "sessionId": "cp-sess", "exitCode": 0,
               "usage": {"premiumRequests": 1, "totalApiDurationMs": 5000}})


@dataclass(frozen=True)
class Agent:
    ok: Callable[[str], bytes]  # a successful run whose final text is the argument
    fail: Callable[[str], bytes] | None  # a failed run reporting this message
    session: str | None
    cost: float | None
    exact_text: bool = True  # False: plain text, the result is the output's end


AGENT_OUTPUTS: dict[str, Agent] = {
    "claude": Agent(lambda t: jl(claude_result(t)),
                    lambda m: jl(claude_result(m, is_error=True, cost=0)), "c-sess", 0.0123),
    "cursor": Agent(lambda t: jl(claude_result(t, session="cur-sess", cost=None,
                                               request_id="req-1")),
                    lambda m: jl(claude_result(m, is_error=True, session="cur-sess",
                                               cost=None, subtype="error")),
                    "cur-sess", None),
    "amp": Agent(lambda t: jl({"type": "system", "subtype": "init", "session_id": "T-amp"},
                              {"type": "assistant", "session_id": "T-amp",
                               "message": {"role": "assistant",
                                           "content": [{"type": "text", "text": t}]}},
                              claude_result(t, session="T-amp", cost=None)),
                 lambda m: jl({"type": "system", "subtype": "init", "session_id": "T-amp"},
                              claude_result(None, is_error=True, session="T-amp", cost=None,
                                            subtype="error_during_execution", error=m)),
                 "T-amp", None),
    "qwen": Agent(lambda t: (json.dumps([
                      {"type": "system", "subtype": "init", "session_id": "q-sess"},
                      {"type": "assistant", "session_id": "q-sess",
                       "message": {"role": "assistant",
                                   "content": [{"type": "text", "text": t}]}},
                      claude_result(t, session="q-sess", cost=None)]) + "\n").encode(),
                  lambda m: (json.dumps([
                      {"type": "system", "subtype": "init", "session_id": "q-sess"},
                      claude_result(None, is_error=True, session="q-sess", cost=None,
                                    subtype="error_during_execution",
                                    error={"type": "api_error", "message": m})]) + "\n"
                             ).encode(),
                  "q-sess", None),
    "codex": Agent(codex_ok, codex_fail, "0199a213-81c0-7800-8aa1-bbab2a035a53", None),
    "gemini": Agent(lambda t: gemini_out(response=t, stats={"models": {
                        "gemini-2.5-pro": {"tokens": {"prompt": 900, "total": 1000}}}}),
                    lambda m: gemini_out(error={"type": "ApiError", "message": m, "code": 1}),
                    "g-sess", None),
    "opencode": Agent(opencode_ok, opencode_fail, "ses_6a1b2c3d4e5fXyZ", None),
    "pi": Agent(pi_out, lambda m: pi_out("", stop="error", error=m, cost=0.0),
                "pi-sess-1", 0.01),
    "goose": Agent(goose_out,
                   # goose reports provider failures on stderr, without the JSON
                   lambda m: f"Error: {m}\n".encode(), None, 0.02),
    "aider": Agent(lambda t: ("Aider v0.86.1\nMain model: anthropic/claude-sonnet-4 with "
                              "diff edit format\nGit repo: .git with 12 files\n\n"
                              f"Applied edit to src/app.py\n{t}\n").encode(),
                   lambda m: (f"litellm.RateLimitError: AnthropicException - {m}\n"
                              "The API provider has rate limited you. Try again later or "
                              "check your quotas.\n").encode(),
                   None, None, exact_text=False),
    "crush": Agent(lambda t: f"{t}\n".encode(), lambda m: f"Error: {m}\n".encode(),
                   None, None, exact_text=False),
    "copilot": Agent(copilot_ok, None, "cp-sess", None),
}
