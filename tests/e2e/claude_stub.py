"""A scripted model behind a local Anthropic Messages API, for driving the
real Claude Code CLI end to end.

The model calls the shell tool with `command` (or each of a list of
commands in turn, the next once the previous `tool_result` is back); with no
command left (or none given) it answers `final` and ends the turn. With
`write=(path, text)` it first makes that change with Claude Code's own
`Write` tool, then goes on as above. Requests that are not the agent's main
conversation (no shell tool offered: titles, quota probes) get a short plain
answer. Everything the CLI sends is kept in `stub.requests`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .common import Request, Stub, sse

SHELL_TOOL = "Bash"
_ids = itertools.count(1)


def _last_user_has_tool_result(body: dict[str, Any]) -> bool:
    messages = body.get("messages") or []
    if not messages:
        return False
    content = messages[-1].get("content")
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content)


def shell_tool(body: dict[str, Any]) -> dict[str, Any] | None:
    """The shell tool the CLI offers, if any."""
    for tool in body.get("tools") or []:
        if isinstance(tool, dict) and tool.get("name") == SHELL_TOOL:
            return tool
    return None


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every tool_result block in the request's messages."""
    out = []
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, list):
            out += [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    return out


def _usage(output_tokens: int = 0) -> dict[str, int]:
    return {"input_tokens": 10, "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def _message(model: str, blocks: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {"id": f"msg_stub{next(_ids)}", "type": "message", "role": "assistant",
            "model": model, "content": blocks, "stop_reason": stop, "stop_sequence": None,
            "usage": _usage(5)}


def _stream(message: dict[str, Any]) -> bytes:
    start = dict(message, content=[], stop_reason=None, usage=_usage(1))
    events: list[tuple[str | None, Any]] = [("message_start", {"type": "message_start",
                                                               "message": start})]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            events += [
                ("content_block_start", {"type": "content_block_start", "index": index,
                                         "content_block": {"type": "text", "text": ""}}),
                ("content_block_delta", {"type": "content_block_delta", "index": index,
                                         "delta": {"type": "text_delta",
                                                   "text": block["text"]}}),
            ]
        else:
            events += [
                ("content_block_start", {"type": "content_block_start", "index": index,
                                         "content_block": dict(block, input={})}),
                ("content_block_delta", {"type": "content_block_delta", "index": index,
                                         "delta": {"type": "input_json_delta",
                                                   "partial_json": json.dumps(block["input"])}}),
            ]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events += [
        ("message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": message["stop_reason"],
                                     "stop_sequence": None},
                           "usage": {"output_tokens": 5}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return sse(events)


class ClaudeModel:
    """The scripted model; `handle` is a `Stub` handler. `command` may be a
    list: one shell call per answer, the next once the previous result is
    back, then `final`."""

    def __init__(self, command: str | list[str] | None, final: str = "All done.",
                 write: tuple[str, str] | None = None) -> None:
        self.commands = [command] if isinstance(command, str) else list(command or [])
        self.final, self.write = final, write
        self.tool_calls = 0  # shell tool calls answered
        self.writes = 0  # Write tool calls made

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        model = str(body.get("model") or "claude-stub")
        main = shell_tool(body) is not None
        if main and self.write and not self.writes:
            self.writes += 1
            path, text = self.write
            block = {"type": "tool_use", "id": f"toolu_stub{next(_ids)}", "name": "Write",
                     "input": {"file_path": path, "content": text}}
            return _message(model, [block], "tool_use")
        # After a Write the last message holds its result: the first command is next.
        follows_a_result = _last_user_has_tool_result(body)
        if main and self.tool_calls < len(self.commands) \
                and (follows_a_result or not self.tool_calls):
            command = self.commands[self.tool_calls]
            self.tool_calls += 1
            block = {"type": "tool_use", "id": f"toolu_stub{next(_ids)}", "name": SHELL_TOOL,
                     "input": {"command": command, "description": "report"}}
            return _message(model, [block], "tool_use")
        text = self.final if main else "Stub"
        return _message(model, [{"type": "text", "text": text}], "end_turn")

    def handle(self, request: Request) -> tuple[int, dict[str, str], bytes]:
        path = request.path.split("?", 1)[0]
        body = request.json()
        if request.method == "POST" and path.endswith("/messages/count_tokens"):
            return _json(200, {"input_tokens": 10})
        if request.method == "POST" and path.endswith("/v1/messages") and isinstance(body, dict):
            message = self.reply(body)
            if body.get("stream"):
                return 200, {"content-type": "text/event-stream",
                             "request-id": "req_stub"}, _stream(message)
            return _json(200, message)
        # Anything else (probes, telemetry that slipped through): an empty,
        # harmless answer; the test can still see it in `requests`.
        return _json(404, {"type": "error",
                           "error": {"type": "not_found_error", "message": "stub: no such route"}})


def _json(status: int, data: Any) -> tuple[int, dict[str, str], bytes]:
    return status, {"content-type": "application/json"}, json.dumps(data).encode()


def messages(stub: Stub) -> list[dict[str, Any]]:
    """The bodies of the main-conversation /v1/messages requests, in order."""
    out = []
    for request in list(stub.requests):
        body = request.json()
        if request.path.split("?", 1)[0].endswith("/v1/messages") and isinstance(body, dict) \
                and shell_tool(body) is not None:
            out.append(body)
    return out


@contextmanager
def claude_api(command: str | list[str] | None, final: str = "All done.",
               write: tuple[str, str] | None = None) -> Iterator[tuple[Stub, ClaudeModel]]:
    model = ClaudeModel(command, final, write)
    with Stub(model.handle) as server:
        yield server, model
