"""Nothing unauthenticated costs memory (DESIGN §19): 64 half-sent
anonymous bodies (API without a token, webhooks with a forged but
well-formed signature) leave the server's RSS flat, and a client from
another address is still served."""

from __future__ import annotations

import socket
from pathlib import Path

from conftest import CLI
from serve.support import serving


def rss_kib(pid: int) -> int:
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("VmRSS:"):
            return int(row.split()[1])
    raise AssertionError("no VmRSS")


def half_sent(port: int, at: int) -> socket.socket:
    path, size, extra = ("/hooks/github", 25 << 20,
                         f"X-GitHub-Event: push\r\nX-GitHub-Delivery: d-{at}\r\n"
                         f"X-Hub-Signature-256: sha256={'0' * 64}\r\n") if at % 2 else \
        ("/api/loops/x/trigger", 1 << 20, "")
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{extra}"
                 f"Content-Length: {size}\r\n\r\n".encode())
    sock.setblocking(False)
    try:
        sock.send(b"x" * (4 << 20))
    except OSError:
        pass  # answered and closed before the body: as it should be
    return sock


def test_64_half_sent_anonymous_bodies_cost_no_memory(cli: CLI, tmp_path: Path) -> None:
    with serving(tmp_path) as served:
        assert served.request("GET", "/api/loops")[0] == 200
        before = rss_kib(served.proc.pid)
        held = [half_sent(served.port, at) for at in range(64)]
        try:
            grown = rss_kib(served.proc.pid) - before
            legit = socket.create_connection(("127.0.0.1", served.port), timeout=10,
                                             source_address=("127.0.0.2", 0))
            with legit:
                legit.sendall(f"GET /api/loops HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\n"
                              f"Authorization: Bearer {served.token}\r\n\r\n".encode())
                assert legit.recv(100).startswith(b"HTTP/1.0 200"), "a client is served"
            assert grown < 50 * 1024, f"RSS grew {grown} KiB"
        finally:
            for sock in held:
                sock.close()
