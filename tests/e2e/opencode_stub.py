"""A scripted model behind a local OpenAI-compatible chat-completions API, for
driving the real OpenCode CLI end to end, and the opencode config and
environment that point it there (and nowhere else).

OpenCode reaches the stub as a custom provider `stub` (its bundled
`@ai-sdk/openai-compatible`, so nothing is installed for it). The model is two
steps per user turn: while the conversation's last message is not a tool
result, it calls opencode's shell tool once with `command` (or, with no
`command`, answers `final` straight away); once the tool result is back, it
answers `final` with finish_reason "stop". The tool's name and argument names
come from the request's `tools`. Requests that offer no tools (title
generation) get a short plain answer.

Offline: opencode installs `@opencode-ai/plugin` into its config folders in
the background with npm; `npm_config_registry` sends that to the stub (a 404,
which opencode logs and ignores), and proxies for anything else point at the
stub too, so every request is on 127.0.0.1 and recorded in `stub.requests`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .common import Request, Stub, sse

PROVIDER, MODEL = "stub", "stub-model"
MODEL_ID = f"{PROVIDER}/{MODEL}"
CHAT_PATH = "/v1/chat/completions"
NPM_PATH = "/npm/"
SHELL_TOOLS = ("bash", "shell")
SSE_HEADERS = {"content-type": "text/event-stream", "cache-control": "no-cache"}
_ids = itertools.count(1)


def opencode_config(base_url: str) -> dict[str, Any]:
    return {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": MODEL_ID,
        "small_model": MODEL_ID,
        "enabled_providers": [PROVIDER],
        "provider": {PROVIDER: {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Stub",
            "options": {"baseURL": f"{base_url}/v1", "apiKey": "stub-key"},
            "models": {MODEL: {"name": "Stub model", "tool_call": True}},
        }},
    }


def opencode_env(stub: Stub, folder: Path) -> dict[str, str]:
    """Write the config into `folder`; the environment that uses it and keeps
    opencode on 127.0.0.1."""
    path = folder / "opencode-stub.json"
    path.write_text(json.dumps(opencode_config(stub.url), indent=2))
    return {
        "OPENCODE_CONFIG": str(path),
        "OPENCODE_DISABLE_MODELS_FETCH": "1",  # no models.dev catalogue
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",  # auth plugins fetched from npm
        "OPENCODE_DISABLE_PROJECT_CONFIG": "1",
        "OPENCODE_DISABLE_CLAUDE_CODE": "1",  # no ~/.claude prompts or skills
        "npm_config_registry": stub.url + NPM_PATH,
        "npm_config_update_notifier": "false",
        "HTTP_PROXY": stub.url, "HTTPS_PROXY": stub.url,
        "http_proxy": stub.url, "https_proxy": stub.url,
        "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
    }


def shell_tool(body: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """opencode's shell tool in this request: its name and parameter properties."""
    for tool in body.get("tools") or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or fn.get("name") not in SHELL_TOOLS:
            continue
        props = (fn.get("parameters") or {}).get("properties") or {}
        if "command" in props:
            return fn["name"], props
    return None


def tool_results(body: dict[str, Any]) -> list[str]:
    """The text of every tool message in the request's conversation."""
    out = []
    for message in body.get("messages") or []:
        if isinstance(message, dict) and message.get("role") == "tool":
            content = message.get("content")
            if isinstance(content, list):
                content = "".join(str(c.get("text", "")) for c in content
                                  if isinstance(c, dict))
            out.append(str(content))
    return out


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": f"chatcmpl-stub{next(_ids)}", "object": "chat.completion.chunk",
            "created": 0, "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _usage_chunk() -> dict[str, Any]:
    return {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0,
            "model": MODEL, "choices": [],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def text_stream(text: str) -> bytes:
    return sse([(None, _chunk({"role": "assistant", "content": ""})),
                (None, _chunk({"content": text})),
                (None, _chunk({}, "stop")), (None, _usage_chunk()), (None, "[DONE]")])


def tool_stream(name: str, arguments: dict[str, Any]) -> bytes:
    call = {"index": 0, "id": f"call_stub{next(_ids)}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}
    return sse([(None, _chunk({"role": "assistant", "content": None, "tool_calls": [call]})),
                (None, _chunk({}, "tool_calls")), (None, _usage_chunk()), (None, "[DONE]")])


def _whole(text: str) -> bytes:
    return json.dumps({
        "id": "chatcmpl-stub", "object": "chat.completion", "created": 0, "model": MODEL,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }).encode()


class Model:
    """The scripted model: `command` is run once through the shell tool, then
    `final` ends the turn. `conversations` holds the agent's requests (those
    offering the shell tool), `tool_calls` counts the calls made."""

    def __init__(self, command: str | None, final: str) -> None:
        self.command, self.final = command, final
        self.conversations: list[dict[str, Any]] = []
        self.tool_calls = 0

    def __call__(self, request: Request) -> tuple[int, dict[str, str], bytes]:
        body = request.json()
        if request.method != "POST" or request.path != CHAT_PATH or not isinstance(body, dict):
            # The npm registry (opencode's background plugin install), or a
            # stray proxied request: nothing here.
            return 404, {"content-type": "application/json"}, b'{"error": "not found"}'
        tool = shell_tool(body)
        if tool is None:
            # Title generation and other side requests.
            if body.get("stream"):
                return 200, SSE_HEADERS, text_stream("Stub title")
            return 200, {"content-type": "application/json"}, _whole("Stub title")
        self.conversations.append(body)
        messages = body.get("messages") or []
        last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
        if self.command is None or last.get("role") == "tool":
            return 200, SSE_HEADERS, text_stream(self.final)
        name, props = tool
        arguments: dict[str, Any] = {"command": self.command}
        if "description" in props:
            arguments["description"] = "Report the loop decision"
        self.tool_calls += 1
        return 200, SSE_HEADERS, tool_stream(name, arguments)


@contextmanager
def opencode_api(command: str | None, final: str) -> Iterator[tuple[Stub, Model]]:
    model = Model(command, final)
    with Stub(model) as server:
        yield server, model


def chat_requests(stub: Stub) -> list[Request]:
    return [r for r in stub.requests if r.path == CHAT_PATH]


def stray_requests(stub: Stub) -> list[str]:
    """Requests that are neither the model API nor the npm registry."""
    return [f"{r.method} {r.path}" for r in stub.requests
            if r.path != CHAT_PATH and not r.path.startswith(NPM_PATH)]
