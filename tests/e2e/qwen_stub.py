"""An OpenAI chat-completions stub for the real Qwen Code CLI: plays a model
that makes one `run_shell_command` call (or none), then ends with a final text.

Qwen Code 0.24 takes OPENAI_BASE_URL, OPENAI_API_KEY and OPENAI_MODEL from the
environment and streams `POST <base>/chat/completions`; a tool call comes back
as `tool_calls` deltas with finish_reason "tool_calls", the answer as content
deltas with finish_reason "stop". Every request is kept on the stub.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .common import Request, Stub, sse

JSON = {"content-type": "application/json"}
MODEL = "stub-model"
USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


class QwenModel:
    """The model's script. `command`: the shell command its first answer asks
    to run (None: no tool call), or a list of them, one per answer, each asked
    once the previous one's result is back; after the last result (or
    straight away without a command) it answers `final`."""

    def __init__(self, command: str | list[str] | None, final: str = "stub final text") -> None:
        self.commands = [command] if isinstance(command, str) else list(command or [])
        self.final = final
        self.calls = 0
        # The content of every tool message the CLI sent back.
        self.tool_results: list[Any] = []

    def __call__(self, request: Request) -> tuple[int, dict[str, str], bytes]:
        body = request.json()
        if not request.path.endswith("/chat/completions") or not isinstance(body, dict):
            error = {"error": {"message": f"stub: no {request.path}", "type": "not_found"}}
            return 404, JSON, json.dumps(error).encode()
        messages = body.get("messages") or [{}]
        self.tool_results += [m.get("content") for m in messages[-1:] if m.get("role") == "tool"]
        answered = sum(1 for m in messages if m.get("role") == "tool")
        if answered >= len(self.commands) or answered and messages[-1].get("role") != "tool":
            delta: dict[str, Any] = {"role": "assistant", "content": self.final}
            finish = "stop"
        else:
            self.calls += 1
            arguments = json.dumps({"command": self.commands[answered]})
            delta = {"role": "assistant", "tool_calls": [
                {"index": 0, "id": f"call_{self.calls}", "type": "function",
                 "function": {"name": "run_shell_command", "arguments": arguments}}]}
            finish = "tool_calls"
        if not body.get("stream"):
            choice = {"index": 0, "message": delta, "finish_reason": finish}
            return 200, JSON, json.dumps(_chunk("chat.completion", choice, USAGE)).encode()
        chunks = [_chunk("chat.completion.chunk",
                         {"index": 0, "delta": delta, "finish_reason": None}),
                  _chunk("chat.completion.chunk",
                         {"index": 0, "delta": {}, "finish_reason": finish}, USAGE)]
        return 200, {"content-type": "text/event-stream"}, \
            sse([(None, c) for c in chunks] + [(None, "[DONE]")])


def _chunk(kind: str, choice: dict[str, Any], usage: dict[str, int] | None = None) \
        -> dict[str, Any]:
    out: dict[str, Any] = {"id": "chatcmpl-stub", "object": kind, "created": 1,
                           "model": MODEL, "choices": [choice]}
    if usage:
        out["usage"] = usage
    return out


@contextmanager
def qwen_api(model: QwenModel) -> Iterator[tuple[Stub, dict[str, str]]]:
    """The stub running, and the environment that points the CLI at it."""
    with Stub(model) as server:
        # As gemini's (tests/e2e/gemini_stub.py): no second start-up for more heap.
        yield server, {"OPENAI_BASE_URL": server.url + "/v1", "OPENAI_API_KEY": "dummy",
                       "OPENAI_MODEL": MODEL, "QWEN_CODE_NO_RELAUNCH": "1"}


def chat_requests(server: Stub) -> list[dict[str, Any]]:
    """The bodies of the chat requests, in order."""
    return [r.json() for r in server.requests if r.path.endswith("/chat/completions")]
