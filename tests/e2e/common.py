"""What the real-CLI end-to-end tests share: where the pinned CLIs are, and a
local HTTP stub that plays the model.

The CLIs are installed by `.ci/run` (npm, pinned versions below) under
`$LOOPCTL_E2E_BIN` (default /opt/loopctl-e2e/node_modules/.bin). Missing CLIs
skip the tests, except in CI (LOOPCTL_REQUIRE_VALIDATORS=1), where they fail.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

VERSIONS = {"claude": "2.1.332", "codex": "0.171.0", "gemini": "0.61.0", "qwen": "0.24.4",
            "opencode": "1.18.33"}
BIN = Path(os.environ.get("LOOPCTL_E2E_BIN", "/opt/loopctl-e2e/node_modules/.bin"))


def agent_cli(name: str) -> Path:
    """The pinned CLI, or a skip (a failure in CI)."""
    path = BIN / name
    if not path.exists():
        if os.environ.get("LOOPCTL_REQUIRE_VALIDATORS") == "1":
            pytest.fail(f"{name} CLI is required in CI but not installed at {path}")
        pytest.skip(f"{name} CLI not installed at {path}")
    return path


Handler = Callable[["Request"], tuple[int, dict[str, str], bytes]]


class Request:
    def __init__(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        self.method, self.path, self.headers, self.body = method, path, headers, body

    def json(self) -> Any:
        try:
            return json.loads(self.body or b"null")
        except ValueError:
            return None


class Stub:
    """A model API on 127.0.0.1: `handler(request)` answers each request;
    every request is kept in `requests` for the test to inspect."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[Request] = []
        self.lock = threading.Lock()
        stub = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                request = Request(self.command, self.path, dict(self.headers), body)
                with stub.lock:
                    stub.requests.append(request)
                status, headers, payload = stub.handler(request)
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Stub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def stub(handler: Handler) -> Iterator[Stub]:
    with Stub(handler) as server:
        yield server


def sse(events: list[tuple[str | None, Any]]) -> bytes:
    """A server-sent-events body: (event name or None, JSON data) pairs."""
    out = []
    for name, data in events:
        if name:
            out.append(f"event: {name}")
        out.append("data: " + (data if isinstance(data, str) else json.dumps(data)))
        out.append("")
    return ("\n".join(out) + "\n").encode()


def assert_completed(cli: Any, name: str, summary: str, result_end: str) -> None:
    """The loop completed with the agent's summary; the record kept its final text."""
    status = cli.json("status", name)
    assert status["status"] == "completed", status
    assert status["last_decision"]["summary"] == summary, status
    [record] = cli.records(name)
    assert record["result"].endswith(result_end), record


def assert_undecided(cli: Any, name: str, final: str) -> None:
    """No decision reached loopctl: the loop goes on, the record says so."""
    status = cli.json("status", name)
    assert status["status"] != "completed", status
    assert not (status.get("last_decision") or {}).get("decision")
    [record] = cli.records(name)
    assert record["decision"] is None
    assert record["result"] == final


def refusing(status: int, body: Any) -> Handler:
    """A model API that answers every request with `status` and `body`
    (a refused key: 401), as a provider does for a key it does not know."""
    def handle(request: Request) -> tuple[int, dict[str, str], bytes]:
        return status, {"content-type": "application/json"}, json.dumps(body).encode()
    return handle


def assert_auth_held(cli: Any, first: str, start_second: Callable[[], Any],
                     env: dict[str, str], server: Stub | None) -> None:
    """`first`'s run met a refused login (DESIGN §18): outcome auth_error,
    held (auth_required) by its account, not a failure. A loop of the same account made
    afterwards is held by the next `tick` before any agent starts: the
    stub sees no request, the loop has no run, and no second event is sent."""
    [record] = cli.records(first)
    assert record["outcome"] == "auth_error", record
    info = cli.json("status", first)
    assert (info["status"], info["reason"]) == ("held", "auth_required"), info
    assert info["held"]["fix"], info
    assert info["failures"]["consecutive"] == 0, info
    assert "need" in (info.get("note") or ""), info
    start_second()
    seen = len(server.requests) if server is not None else 0
    proc = cli("tick", "--wait", env=env, timeout=240)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    second = next(n for n in cli.state()["loops"] if n != first)
    held = cli.json("status", second)
    assert (held["status"], held["reason"]) == ("held", "auth_required"), held
    assert cli.state()["loops"][second]["status"] == "paused"
    assert not cli.records(second)
    if server is not None:
        assert len(server.requests) == seen, [r.path for r in server.requests[seen:]]
    events = (cli.state_dir / "events.jsonl").read_text().splitlines()
    assert len(events) == 1 and json.loads(events[0])["reason"] == "auth_required", events
