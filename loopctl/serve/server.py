"""The HTTP server: the standard library's threading server, bounded.

Chosen by measurement over an ASGI stack (README "loopctl serve"): it meets
every bound of DESIGN §19 with no dependency, and the overview of 1,000
loops is spent reading loopctl's files, not in the server. Bounds: a
request must arrive whole (line, headers, body) within
`LOOPCTL_SERVE_DEADLINE` (15 s) and each read waits at most a third of it,
or the connection is closed (a slow client holds one thread for seconds,
never forever); at most MAX_CONNECTIONS at once, MAX_PER_PEER of them from
one address; bodies over their route's limit are refused from
`Content-Length` before a byte is read; no chunked bodies; every response
closes its connection (HTTP/1.0), so idle keep-alives hold no thread.

Nothing unauthenticated costs memory (DESIGN §19): the app's `admit` sees
the Host, the route and the credentials before a byte of body is read, and
a body is read only when it admits the request; the bytes of body held in
memory across all connections are bounded (MAX_IN_FLIGHT, a 503 beyond); a
webhook body streams into its HMAC and a file that spills to disk past
SPOOL_MEMORY, and is read back only once its signature holds.
"""

from __future__ import annotations

import re
import socket
import ssl
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from loopctl.domain.untrusted import line
from loopctl.fast.data_class import factory, record

TOKEN_IN_URL = re.compile(r"token=[^&\s\"]*")
MAX_CONNECTIONS = 64
MAX_PER_PEER = 16
MAX_IN_FLIGHT = 16 << 20
SPOOL_MEMORY = 1 << 20
CHUNK = 64 << 10
MAX_BODY = 1 << 20
MAX_HOOK_BODY = 25 << 20


@record
class Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes = b""
    secure: bool = False
    raw_path: str = "/"  # as sent, still %-encoded: what a Location is built from
    digest: str | None = None  # the body's SHA-256, when it was streamed


@record
class Response:
    status: int
    body: bytes = b""
    ctype: str = "application/json"
    headers: list[tuple[str, str]] = factory(list)
    # A long answer (server-sent events): called with a writer once the
    # headers are out; it returns when the client goes or the server stops.
    stream: Callable[[Callable[[bytes], None]], None] | None = None


def body_limit(path: str) -> int:
    return MAX_HOOK_BODY if path.startswith("/hooks/") else MAX_BODY


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], app: Any,
                 tls: ssl.SSLContext | None = None) -> None:
        self.app = app
        self.tls = tls
        from loopctl.settings import knob

        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.peers: dict[str, int] = {}
        self.in_flight = 0
        self.counting = threading.Lock()
        self.deadline = knob("LOOPCTL_SERVE_DEADLINE")
        self.idle = self.deadline / 3
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, Handler)
        if tls is not None:
            # The handshake happens in the connection's thread, bounded
            # like a request: a client that never speaks TLS blocks no one.
            self.socket = tls.wrap_socket(self.socket, server_side=True,
                                          do_handshake_on_connect=False)

    def server_bind(self) -> None:
        # Not HTTPServer's: its getfqdn() can wait seconds on DNS.
        import socketserver

        if self.address_family == socket.AF_INET6:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), \
            int(self.server_address[1])

    def process_request(self, request: Any, client_address: Any) -> None:
        peer = str(client_address[0])
        with self.counting:
            crowded = self.peers.get(peer, 0) >= MAX_PER_PEER
            if not crowded:
                self.peers[peer] = self.peers.get(peer, 0) + 1
        if crowded or not self.slots.acquire(blocking=False):
            if not crowded:
                self._left(peer)
            self.shutdown_request(request)  # full: refuse rather than queue threads
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()
            self._left(str(client_address[0]))

    def _left(self, peer: str) -> None:
        with self.counting:
            self.peers[peer] -= 1
            if not self.peers[peer]:
                del self.peers[peer]

    def reserve(self, size: int) -> bool:
        """Room for `size` more bytes of body in memory, or False."""
        with self.counting:
            if self.in_flight + size > MAX_IN_FLIGHT:
                return False
            self.in_flight += size
            return True

    def release(self, size: int) -> None:
        with self.counting:
            self.in_flight -= size

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if not isinstance(error, (OSError, ssl.SSLError, TimeoutError)):
            self.app.log(f"error serving {client_address[0]}: {type(error).__name__}: "
                         f"{line(str(error))[:300]}")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    server_version = "loopctl"
    sys_version = ""
    server: Server

    def setup(self) -> None:
        self.request.settimeout(self.server.idle)
        self.watchdog = threading.Timer(self.server.deadline, self._expire)
        self.watchdog.daemon = True
        self.watchdog.start()
        if self.server.tls is not None:
            try:
                self.request.do_handshake()
            except BaseException:
                self.watchdog.cancel()
                raise
        super().setup()

    def finish(self) -> None:
        self.watchdog.cancel()
        try:
            super().finish()
        except OSError:
            pass

    def _expire(self) -> None:
        """The request did not arrive whole in time: close it under the
        reading thread, which then ends."""
        try:
            self.request.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:  # the base's name
        said = TOKEN_IN_URL.sub("token=****", format % args)  # never the token in a log
        self.server.app.log_request(self.client_address[0], line(said)[:300])

    def do_GET(self) -> None:  # the base class's names
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        parts = urlsplit(self.path)
        headers = {k.lower(): v for k, v in self.headers.items()}
        request = Request(self.command, unquote(parts.path), parts.query, headers,
                          secure=self.server.tls is not None, raw_path=parts.path)
        app = self.server.app
        refused = app.admit(request)  # Host, route, credentials: before any body
        if refused is None and request.method == "POST":
            refused = self._read_body(request)
        response = refused or app.handle(request)
        self.watchdog.cancel()
        self._send(response, head=self.command == "HEAD")

    def _read_body(self, request: Request) -> Response | None:
        headers = request.headers
        if "transfer-encoding" in headers:
            return error(411, "send the body with a Content-Length (no chunked bodies)")
        length_text = headers.get("content-length", "0").strip()
        if not (length_text.isascii() and length_text.isdigit()):
            return error(400, f"bad Content-Length {line(length_text)[:40]!r}")
        length, limit = int(length_text), body_limit(request.path)
        if length > limit:
            return error(413, f"the body is {length} bytes; at most {limit} are accepted here")
        held = min(length, SPOOL_MEMORY)
        if not length:
            return None
        if not self.server.reserve(held):
            return error(503, "too many bodies in flight: try again shortly",
                         [("Retry-After", "5")])
        try:
            return self._stream_body(request, length)
        finally:
            self.server.release(held)

    def _stream_body(self, request: Request, length: int) -> Response | None:
        """Read the body in chunks into its digests and a file that spills to
        disk past SPOOL_MEMORY; a webhook's is kept only if its signature
        holds."""
        import hashlib
        import tempfile

        mac = self.server.app.body_mac(request)
        digest = hashlib.sha256()
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY) as spool:
            left = length
            while left:
                chunk = self.rfile.read(min(CHUNK, left))
                if not chunk:
                    return error(400, "the body ended before its Content-Length")
                left -= len(chunk)
                digest.update(chunk)
                spool.write(chunk)
                if mac is not None:
                    mac.update(chunk)
            refused = self.server.app.unsigned(request, mac) if mac is not None else None
            if refused is not None:
                return refused  # a forged body is never read back
            spool.seek(0)
            request.body, request.digest = spool.read(), digest.hexdigest()
        return None

    def _send(self, response: Response, head: bool) -> None:
        try:
            self.send_response(response.status)
            self.send_header("Content-Type", response.ctype)
            own = {name.lower() for name, _ in response.headers}  # a page's own CSP wins
            for name, value in [*(h for h in SECURITY_HEADERS if h[0].lower() not in own),
                                *response.headers]:
                self.send_header(name, value)
            if response.stream is None:
                self.send_header("Content-Length", str(len(response.body)))
            self.end_headers()
            if head:
                return
            if response.stream is not None:
                self.request.settimeout(max(self.server.idle, 30.0))
                response.stream(self._write)
            else:
                self.wfile.write(response.body)
        except OSError:
            pass  # the client went away

    def _write(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()


SECURITY_HEADERS = [
    ("Cache-Control", "no-store"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
    ("Content-Security-Policy", "default-src 'none'; style-src 'self'; script-src 'self'; "
     "img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
     "base-uri 'none'"),
]


def error(status: int, message: str, headers: list[tuple[str, str]] | None = None) -> Response:
    import json

    return Response(status, json.dumps({"error": message}).encode() + b"\n",
                    headers=headers or [])
