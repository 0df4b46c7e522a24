"""A real `loopctl serve` process for a test, and plain HTTP requests to it
(http.client: nothing here may smooth over what the server sends)."""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from conftest import loopctl_argv

SECRET = b"it's a secret to everybody"


class Served:
    """The server's URL (with the token), and requests to it."""

    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc = proc
        self.url = url
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "", parts.port or 0
        self.token = url.split("token=", 1)[1]
        self.base = f"http://{self.host}:{self.port}"

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None,
                token: str | None = "bearer") -> tuple[int, dict[str, str], bytes]:
        sent = dict(headers or {})
        if token == "bearer":
            sent.setdefault("Authorization", f"Bearer {self.token}")
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=sent)
            answer = conn.getresponse()
            return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
        finally:
            conn.close()

    def json(self, method: str, path: str, body: bytes | None = None,
             **kwargs: Any) -> tuple[int, Any]:
        status, _, data = self.request(method, path, body, **kwargs)
        return status, json.loads(data)

    def github(self, event: str, payload: Any, delivery: str = "d-1",
               secret: bytes = SECRET, raw: bytes | None = None) -> tuple[int, Any]:
        body = raw if raw is not None else json.dumps(payload).encode()
        signature = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
        return self.json("POST", "/hooks/github", body, token=None, headers={
            "X-GitHub-Event": event, "X-GitHub-Delivery": delivery,
            "X-Hub-Signature-256": signature, "Content-Type": "application/json"})


@contextmanager
def serving(tmp: Path, *args: str, secret: bool = True,
            env: dict[str, str] | None = None) -> Iterator[Served]:
    """`loopctl serve --bind 127.0.0.1:0` until the block ends; its first
    line of output is the URL."""
    extra = list(args)
    if secret:
        secret_file = tmp / "webhook-secret"
        secret_file.write_bytes(SECRET + b"\n")
        extra += ["--github-secret-file", str(secret_file)]
    if "--bind" not in extra:
        extra += ["--bind", "127.0.0.1:0"]
    log = open(tmp / "serve.stderr", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(loopctl_argv("serve", *extra), stdout=subprocess.PIPE,
                            stderr=log, text=True, env=dict(os.environ, **(env or {})))
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("loopctl serve: open "), \
            (first, (tmp / "serve.stderr").read_text())
        yield Served(proc, first.split("open ", 1)[1].strip())
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
        if proc.stdout is not None:
            proc.stdout.close()
