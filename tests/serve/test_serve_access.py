"""Who may come in (DESIGN §19), each refusal against a real server: no or
a wrong token, a wrong `Host`, a cookie POST without its CSRF token,
bodies over their bound, chunked bodies, a slow client; and what is let
in: the bearer token, the `?token=` URL turned into a cookie, TLS."""

from __future__ import annotations

import os
import select
import socket
import ssl
import stat
import subprocess
import time
from pathlib import Path

import pytest

from conftest import CLI, agent_command
from serve.support import Served, serving


def paused_loop(cli: CLI) -> None:
    cli("start", "p", "--name", "demo", "--every", "1h", "--after", "1h",
        "--command", agent_command(), check=0)


def status_of(cli: CLI) -> str:
    return str(cli.state()["loops"]["demo"]["status"])


def test_no_or_wrong_token_is_refused_everywhere(cli: CLI, tmp_path: Path) -> None:
    paused_loop(cli)
    with serving(tmp_path) as served:
        for path in ("/api/loops", "/api/loops/demo", "/metrics", "/"):
            for sent in ({}, {"Authorization": "Bearer wrong"},
                         {"Authorization": f"Bearer {served.token}x"},
                         {"Cookie": f"loopctl_{served.port}=wrong"}):
                status, headers, body = served.request("GET", path, headers=sent, token=None)
                assert status == 401, (path, sent, status)
                assert served.token.encode() not in body
            assert headers["www-authenticate"].startswith("Bearer")
        status, _, _ = served.request("POST", "/api/loops/demo/pause", token=None)
        assert status == 401
        status, _, _ = served.request("POST", "/hooks/trigger/demo", b"x", token=None)
        assert status == 401
        status, _, _ = served.request("GET", "/?token=wrong", token=None)
        assert status == 401
    assert status_of(cli) == "active", "nothing was done for a caller without the token"


def test_the_token_url_becomes_a_strict_cookie_and_a_redirect_without_it(
        cli: CLI, tmp_path: Path) -> None:
    paused_loop(cli)
    with serving(tmp_path) as served:
        status, headers, _ = served.request("GET", f"/loops/demo?x=1&token={served.token}",
                                            token=None)
        assert status == 303
        assert headers["location"] == "/loops/demo?x=1", "the token is dropped from the URL"
        cookie = headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
        pair = cookie.split(";", 1)[0]
        status, _, body = served.request("GET", "/loops/demo", headers={"Cookie": pair},
                                         token=None)
        assert status == 200 and b"<h1>demo</h1>" in body
        log = (tmp_path / "serve.stderr").read_text()
        assert served.token not in log, "the token never reaches the request log"


def test_the_token_file_is_private_and_new_token_replaces_it(cli: CLI,
                                                              tmp_path: Path) -> None:
    token_file = cli.state_dir / "serve.token"
    with serving(tmp_path) as served:
        first = served.token
    assert token_file.read_text().strip() == first
    assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
    with serving(tmp_path) as served:
        assert served.token == first, "kept across restarts"
    with serving(tmp_path, "--new-token") as served:
        assert served.token != first
        status, _, _ = served.request("GET", "/api/loops", token=None,
                                      headers={"Authorization": f"Bearer {first}"})
        assert status == 401, "the old token no longer opens anything"
        assert served.json("GET", "/api/loops")[0] == 200


def test_a_wrong_host_is_refused_even_with_the_token(cli: CLI, tmp_path: Path) -> None:
    paused_loop(cli)
    with serving(tmp_path, "--allowed-host", "loops.example") as served:
        for host in ("evil.example", f"evil.example:{served.port}", "127.0.0.1:1", ""):
            status, _, _ = served.request("POST", "/api/loops/demo/pause",
                                          headers={"Host": host})
            assert status == 403, host
        assert status_of(cli) == "active", "nothing fired for a rebound name"
        for host in (f"localhost:{served.port}", "loops.example",
                     f"loops.example:{served.port}"):
            status, _, _ = served.request("GET", "/api/loops", headers={"Host": host})
            assert status == 200, host


def logged_in(served: Served, path: str = "/") -> str:
    """The `name=value` cookie pair a browser keeps after opening `?token=`."""
    status, headers, _ = served.request("GET", f"{path}?token={served.token}", token=None)
    assert status == 303, headers
    return headers["set-cookie"].split(";", 1)[0]


def csrf_of(page: bytes) -> bytes:
    return page.split(b'name="csrf" value="', 1)[1].split(b'"', 1)[0]


def test_a_cookie_post_needs_the_csrf_token_of_its_session(cli: CLI, tmp_path: Path) -> None:
    paused_loop(cli)
    with serving(tmp_path) as served:
        cookie = {"Cookie": logged_in(served),
                  "Content-Type": "application/x-www-form-urlencoded"}
        other = {"Cookie": logged_in(served), "Content-Type": cookie["Content-Type"]}
        _, _, page = served.request("GET", "/loops/demo", headers=other, token=None)
        others = csrf_of(page)
        for body in (b"", b"csrf=", b"csrf=0123456789abcdef", b"csrf=" + others):
            status, _, _ = served.request("POST", "/loops/demo/pause", body, headers=cookie,
                                          token=None)
            assert status == 403, body
        assert status_of(cli) == "active", "a forged form changed nothing"
        _, _, page = served.request("GET", "/loops/demo", headers=cookie, token=None)
        assert csrf_of(page) != others, "a CSRF token per session"
        status, _, body = served.request("POST", "/loops/demo/pause", b"csrf=" + csrf_of(page),
                                         headers=cookie, token=None)
        assert status == 200 and b"paused" in body
    assert status_of(cli) == "paused"


def test_the_session_cookie_is_never_the_token_nor_a_bearer(cli: CLI, tmp_path: Path) -> None:
    """What another service on the same host name receives opens pages
    only: as a bearer token, or as a cookie on the API, metrics and hooks,
    it is refused, and it cannot pause a loop there."""
    paused_loop(cli)
    with serving(tmp_path) as served:
        pair = logged_in(served)
        value = pair.split("=", 1)[1]
        assert served.token not in pair
        bearer = {"Authorization": f"Bearer {value}"}
        for method, path in (("GET", "/api/loops"), ("GET", "/metrics"),
                             ("POST", "/api/loops/demo/pause"),
                             ("POST", "/hooks/trigger/demo")):
            for headers in (bearer, {"Cookie": pair}):
                status, _, _ = served.request(method, path, b"", headers=headers, token=None)
                assert status == 401, (method, path, headers)
        assert served.request("GET", "/", headers={"Cookie": pair}, token=None)[0] == 200
    assert status_of(cli) == "active"
    with serving(tmp_path) as served:  # a restart forgets every session
        assert served.request("GET", "/", headers={"Cookie": pair}, token=None)[0] == 401


@pytest.mark.parametrize("path", ["/%2F%2Fevil.example", "/%2f%2Fevil.example/x",
                                  "/%0d%0aSet-Cookie:%20x=1", "/%5C%5Cevil.example"])
def test_the_redirect_after_the_token_stays_on_this_server(cli: CLI, tmp_path: Path,
                                                          path: str) -> None:
    with serving(tmp_path) as served:
        status, headers, _ = served.request("GET", f"{path}?token={served.token}&a=%0d%0a",
                                            token=None)
    location = headers.get("location", "/")
    assert location.startswith("/") and not location.startswith(("//", "/\\")), location
    assert location.split("?")[0] == path and location.endswith("a=%0D%0A"), location
    assert status == 303 and "x=1" not in headers.get("set-cookie", "")


def test_bodies_over_their_bound_and_chunked_bodies_are_refused_unread(
        cli: CLI, tmp_path: Path) -> None:
    paused_loop(cli)
    with serving(tmp_path) as served:
        # Only the headers are sent: the answer comes from Content-Length alone.
        for path, size in (("/api/loops/demo/trigger", (1 << 20) + 1),
                           ("/hooks/github", (25 << 20) + 1)):
            answer = raw_exchange(served, f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:"
                                  f"{served.port}\r\nAuthorization: Bearer {served.token}\r\n"
                                  "X-GitHub-Event: push\r\nX-GitHub-Delivery: d-1\r\n"
                                  f"X-Hub-Signature-256: sha256={'0' * 64}\r\n"
                                  f"Content-Length: {size}\r\n\r\n".encode())
            assert answer.startswith(b"HTTP/1.0 413"), answer[:100]
        answer = raw_exchange(served, f"POST /api/loops/demo/trigger HTTP/1.1\r\nHost: "
                              f"127.0.0.1:{served.port}\r\nAuthorization: Bearer "
                              f"{served.token}\r\nTransfer-Encoding: chunked\r\n\r\n"
                              "3\r\nabc\r\n0\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.0 411"), answer[:100]
        # A digit to str.isdigit that int() refuses: a bad request, not a crash.
        answer = raw_exchange(served, f"POST /api/loops/demo/trigger HTTP/1.1\r\nHost: "
                              f"127.0.0.1:{served.port}\r\nAuthorization: Bearer "
                              f"{served.token}\r\nContent-Length: \u00b2\r\n\r\n"
                              .encode("latin-1"))
        assert answer.startswith(b"HTTP/1.0 400"), answer[:100]
    assert cli.state()["loops"]["demo"].get("triggered") is None, "nothing was triggered"


def raw_exchange(served: Served, data: bytes, timeout: float = 10.0) -> bytes:
    with socket.create_connection((served.host, served.port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_a_slow_client_is_cut_off_while_others_are_served(cli: CLI, tmp_path: Path) -> None:
    with serving(tmp_path, env={"LOOPCTL_SERVE_DEADLINE": "1.5"}) as served:
        slow = socket.create_connection((served.host, served.port), timeout=20)
        started = time.monotonic()
        slow.sendall(b"GET /api/loops HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
        assert served.json("GET", "/api/loops")[0] == 200, "the server serves meanwhile"
        # A header line every 0.2 s keeps each read alive (a read may wait
        # 0.5 s), never the request: only the whole-request deadline ends it.
        ended = b"open"
        for _ in range(50):
            try:
                slow.sendall(b"X-Slow: 1\r\n")
                readable, _, _ = select.select([slow], [], [], 0.2)
                if readable:
                    ended = slow.recv(100)
                    break
            except OSError:
                ended = b"closed"
                break
        took = time.monotonic() - started
        slow.close()
        assert ended in (b"", b"closed") or ended.startswith(b"HTTP/1.0 408"), ended
        # Cut off inside the 10 s this client trickles for: the 1.5 s deadline,
        # not a per-read timeout (each read was kept alive); `ended` says so.
        assert took < 50 * 0.2 + 5, f"the slow client was held {took:.1f}s"
        assert served.json("GET", "/api/loops")[0] == 200, "and still serves after"


def test_tls_serves_https_and_a_public_bind_without_it_warns(cli: CLI,
                                                              tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    with serving(tmp_path, "--tls-cert", str(cert), "--tls-key", str(key)) as served:
        assert served.url.startswith("https://")
        import http.client

        context = ssl.create_default_context(cafile=str(cert))
        conn = http.client.HTTPSConnection(served.host, served.port, context=context,
                                           timeout=20)
        conn.request("GET", f"/?token={served.token}")
        answer = conn.getresponse()
        assert answer.status == 303 and "Secure" in answer.getheader("Set-Cookie", "")
        conn.close()
    assert "warning" not in (tmp_path / "serve.stderr").read_text()
    with serving(tmp_path, "--bind", "0.0.0.0:0"):
        pass
    warned = (tmp_path / "serve.stderr").read_text()
    assert "warning: serving 0.0.0.0 without TLS" in warned


@pytest.mark.parametrize(("args", "code", "said"), [
    (["--bind", "nonsense"], 2, "bad --bind 'nonsense': expected HOST:PORT"),
    (["--bind", "127.0.0.1:70000"], 2, "bad --bind"),
    (["--bind", "127.0.0.1:\u00b2"], 2, "bad --bind"),
    (["--tls-cert", "/nonexistent"], 2, "give --tls-cert and --tls-key together"),
    (["--github-secret-file", "/nonexistent"], 2, "bad --github-secret-file"),
])
def test_bad_options_are_one_line_and_serve_nothing(cli: CLI, args: list[str], code: int,
                                                    said: str) -> None:
    proc = cli("serve", *args)
    assert proc.returncode == code and said in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not proc.stdout


def test_a_damaged_token_file_is_refused_not_replaced(cli: CLI) -> None:
    token_file = cli.state_dir / "serve.token"
    token_file.parent.mkdir(parents=True)
    token_file.write_text("short\n")
    proc = cli("serve", "--bind", "127.0.0.1:0")
    assert proc.returncode == 3 and "--new-token" in proc.stderr
    assert token_file.read_text() == "short\n", "nothing overwritten"
