"""A scripted model behind a local OpenAI Responses API, for driving the real
Codex CLI (`codex exec`) end to end.

Codex reads its provider from `$CODEX_HOME/config.toml` (default
`~/.codex`; OPENAI_BASE_URL is ignored): `install` writes one that points at
the stub, with telemetry, plugin sync and retries off so that nothing leaves
127.0.0.1 and a broken exchange fails at once instead of after back-offs.

The model plays a list of `Turn`s, one per user turn (one per `codex exec`,
a resumed session included): a turn with a `command` first calls the shell
tool Codex offers (found in the request's `tools`), and once the
`function_call_output` comes back answers `final`; a turn without one
answers `final` straight away. Anything unexpected is kept in `errors` and
answered with a 400, which Codex does not retry.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .common import Request, Stub, sse

KEY_ENV = "LOOPCTL_E2E_CODEX_KEY"
KEY = "stub-key"
MODEL = "gpt-stub"
_ids = itertools.count(1)


@dataclass(frozen=True)
class Turn:
    final: str
    command: str | None = None


@dataclass
class Call:
    """One POST /v1/responses as the stub saw it."""
    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def input(self) -> list[dict[str, Any]]:
        return [i for i in self.body.get("input") or [] if isinstance(i, dict)]

    @property
    def metadata(self) -> dict[str, Any]:
        """Codex's x-codex-turn-metadata header: thread_id, sandbox_mode..."""
        try:
            value = json.loads(self.headers.get("x-codex-turn-metadata") or "{}")
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    def texts(self) -> list[str]:
        """Every text in the request's conversation (its history included)."""
        out = []
        for item in self.input:
            for part in item.get("content") or []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    out.append(part["text"])
        return out


def config_toml(url: str) -> str:
    return f"""\
model_provider = "stub"
model = "{MODEL}"

[model_providers.stub]
name = "loopctl e2e stub"
base_url = "{url}/v1"
wire_api = "responses"
supports_websockets = false
env_key = "{KEY_ENV}"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[features]
plugins = false
remote_plugin = false
apps = false

# As for a user whose loopctl home is not under /tmp: only the working
# directory and the preset's writable_roots (the decision folder) are
# writable, so the test fails if the preset stops granting that folder.
[sandbox_workspace_write]
exclude_slash_tmp = true
exclude_tmpdir_env_var = true
"""


def install(home: Path, url: str) -> Path:
    """Write `home/.codex/config.toml` pointing Codex at the stub."""
    folder = home / ".codex"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.toml"
    path.write_text(config_toml(url))
    return path


def shell_arguments(tools: list[Any], command: str) -> tuple[str, dict[str, Any]]:
    """The name and arguments of a call running `command` with the shell tool
    Codex offers (0.171: `exec_command` taking `cmd`; older: `shell` taking
    an argv `command`)."""
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type") != "function":
            continue
        props = (tool.get("parameters") or {}).get("properties") or {}
        if (props.get("cmd") or {}).get("type") == "string":
            return tool["name"], {"cmd": command}
        if "command" in props:
            kind = (props["command"] or {}).get("type")
            value: Any = ["bash", "-c", command] if kind == "array" else command
            return tool["name"], {"command": value}
    names = [t.get("name") or t.get("type") for t in tools if isinstance(t, dict)]
    raise LookupError(f"no shell tool among the request's tools: {names}")


def _usage() -> dict[str, Any]:
    return {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 15}


def _stream(item: dict[str, Any]) -> bytes:
    rid = f"resp_stub{next(_ids)}"
    return sse([
        ("response.created", {"type": "response.created",
                              "response": {"id": rid, "status": "in_progress", "output": []}}),
        ("response.output_item.added", {"type": "response.output_item.added",
                                        "output_index": 0, "item": item}),
        ("response.output_item.done", {"type": "response.output_item.done",
                                       "output_index": 0, "item": item}),
        ("response.completed", {"type": "response.completed",
                                "response": {"id": rid, "status": "completed",
                                             "output": [item], "usage": _usage()}}),
    ])


def _message(text: str) -> dict[str, Any]:
    return {"type": "message", "id": f"msg_stub{next(_ids)}", "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


class CodexModel:
    """The handler for `Stub`: plays `turns` in order."""

    def __init__(self, *turns: Turn) -> None:
        self.turns = list(turns)
        self.turn: Turn | None = None
        self.pending: str | None = None  # the call_id awaiting its output
        self.calls: list[Call] = []
        self.outputs: list[str] = []  # every function_call_output Codex sent back
        self.errors: list[str] = []

    def __call__(self, request: Request) -> tuple[int, dict[str, str], bytes]:
        try:
            return self._answer(request)
        except Exception as exc:  # reported to the test, not raised in the server thread
            self.errors.append(f"{request.method} {request.path}: {exc!r}")
            return 400, {"content-type": "application/json"}, json.dumps(
                {"error": {"message": f"stub: {exc}", "type": "invalid_request_error"}}).encode()

    def _answer(self, request: Request) -> tuple[int, dict[str, str], bytes]:
        if request.method != "POST" or request.path.rstrip("/") != "/v1/responses":
            raise LookupError("unexpected request")
        body = request.json()
        if not isinstance(body, dict):
            raise ValueError("body is not a JSON object")
        call = Call(body, {k.lower(): v for k, v in request.headers.items()})
        self.calls.append(call)
        last = call.input[-1] if call.input else {}
        if last.get("type") == "function_call_output":
            if last.get("call_id") != self.pending or self.turn is None:
                raise ValueError(f"output for a call not made: {last.get('call_id')}")
            output = last.get("output")
            self.outputs.append(output if isinstance(output, str) else json.dumps(output))
            self.pending = None
            return self._ok(_message(self.turn.final))
        if not self.turns:
            raise LookupError("a new turn, but the script has no turns left")
        self.turn = self.turns.pop(0)
        if self.turn.command is None:
            return self._ok(_message(self.turn.final))
        name, arguments = shell_arguments(body.get("tools") or [], self.turn.command)
        self.pending = f"call_stub{next(_ids)}"
        return self._ok({"type": "function_call", "id": f"fc_stub{next(_ids)}",
                         "call_id": self.pending, "name": name,
                         "arguments": json.dumps(arguments), "status": "completed"})

    @staticmethod
    def _ok(item: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        return 200, {"content-type": "text/event-stream"}, _stream(item)


@contextmanager
def codex_model(home: Path, *turns: Turn) -> Iterator[CodexModel]:
    """A stub serving `turns`, with `home/.codex/config.toml` pointing at it."""
    model = CodexModel(*turns)
    with Stub(model) as server:
        install(home, server.url)
        yield model
