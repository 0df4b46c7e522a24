"""A Gemini API stub for the real Gemini CLI: plays a model that makes one
`run_shell_command` call (or none), then ends with a final text.

Gemini CLI 0.61 with an API key and GOOGLE_GEMINI_BASE_URL calls
`/v1beta/models/<model>:streamGenerateContent?alt=sse` for the conversation
and `:generateContent` for side jobs (its model router asks for a complexity
score as JSON). Every request is kept on the stub for the test to read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .common import Request, Stub, sse

JSON = {"content-type": "application/json"}
USAGE = {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}


class GeminiModel:
    """The model's script. `command`: the shell command its first answer asks
    to run (None: no tool call), or a list of them, one per answer, each asked
    once the previous one's response is back; after the last response (or
    straight away without a command) it answers `final`. Tests may change
    `commands` and `final` between runs."""

    def __init__(self, command: str | list[str] | None, final: str = "stub final text") -> None:
        self.commands = [command] if isinstance(command, str) else list(command or [])
        self.final = final
        # Every functionResponse the CLI sent back: what the tool call did.
        self.tool_responses: list[dict[str, Any]] = []

    def __call__(self, request: Request) -> tuple[int, dict[str, str], bytes]:
        path = request.path
        body = request.json() if request.method == "POST" else None
        if ":streamGenerateContent" in path and isinstance(body, dict):
            return 200, {"content-type": "text/event-stream"}, sse([(None, self._turn(body))])
        if ":generateContent" in path:
            # Side requests (the model router): a JSON answer that fits them.
            answer = {"complexity_reasoning": "a stub task", "complexity_score": 5}
            return 200, JSON, json.dumps(_candidate([{"text": json.dumps(answer)}])).encode()
        if ":countTokens" in path:
            return 200, JSON, b'{"totalTokens": 10}'
        error = {"error": {"code": 404, "message": f"stub: no {path}", "status": "NOT_FOUND"}}
        return 404, JSON, json.dumps(error).encode()

    def _turn(self, body: dict[str, Any]) -> dict[str, Any]:
        contents = body.get("contents") or [{}]
        parts = contents[-1].get("parts") or []
        responses = [p["functionResponse"] for p in parts if "functionResponse" in p]
        self.tool_responses += responses
        answered = sum(1 for c in contents for p in c.get("parts") or []
                       if "functionResponse" in p)
        if answered >= len(self.commands) or answered and not responses:
            return _candidate([{"text": self.final}])
        call = {"name": "run_shell_command", "args": {"command": self.commands[answered]}}
        return _candidate([{"functionCall": call}])


def _candidate(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model", "parts": parts},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": USAGE}


@contextmanager
def gemini_api(model: GeminiModel, home: Path) -> Iterator[tuple[Stub, dict[str, str]]]:
    """The stub running, and the environment that points the CLI at it (with
    `home`'s settings choosing API-key auth)."""
    settings = home / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}))
    with Stub(model) as server:
        # Started with less heap than half the machine's memory, the CLI starts
        # itself again with more (a second Node start-up, ~1.5 s of CPU); the
        # child runs the same code with the same arguments and output.
        yield server, {"GOOGLE_GEMINI_BASE_URL": server.url, "GEMINI_API_KEY": "dummy",
                       "GEMINI_CLI_NO_RELAUNCH": "1"}


def stream_requests(server: Stub) -> list[dict[str, Any]]:
    """The bodies of the conversation requests, in order."""
    return [r.json() for r in server.requests if ":streamGenerateContent" in r.path]
