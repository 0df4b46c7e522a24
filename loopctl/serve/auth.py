"""Who may come in (DESIGN §19): the home's token, the browser's session,
the CSRF token of its forms, and the `Host` a request names.

The token travels only as `Authorization: Bearer TOKEN` (API, metrics, the
generic webhook) or once, as `?token=` in the URL `serve` prints. The
browser never keeps it: cookies ignore ports, so every service on the same
host name receives them (another user's server, a dev server an agent
starts). `?token=` mints a session instead: a random id in this server's
memory, expiring after 12 h idle, bounded in number, set as an HttpOnly,
SameSite=Strict cookie (`__Host-` and `Secure` under TLS). A session opens
pages, their forms, their assets and their live stream, never `/api`,
`/metrics` or `/hooks`, and never as a bearer token. Each session has a
CSRF token of its own, which a cookie-authenticated POST must carry. Every
comparison is constant-time.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable
from urllib.parse import parse_qsl, urlencode

from loopctl.fast.data_class import record

LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
WILDCARD = ("0.0.0.0", "::")
SESSION_IDLE = 12 * 3600.0
MAX_SESSIONS = 256
# What a session may open: pages, their forms and assets, their live stream.
NOT_FOR_SESSIONS = ("/api/", "/metrics", "/hooks/")
PAGE_FEEDS = ("/api/events",)


@record(frozen=True)
class Caller:
    """How a request proved itself: `bearer`, `session`, or None; a
    session's CSRF token."""

    via: str | None
    csrf: str = ""


@record
class Session:
    csrf: str
    seen: float


class Sessions:
    """The browser sessions of this server, in memory only (a restart logs
    every browser out), the least recently used dropped past `limit`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 idle: float = SESSION_IDLE, limit: int = MAX_SESSIONS) -> None:
        self.clock, self.idle, self.limit = clock, idle, limit
        self.lock = threading.Lock()
        self.live: dict[str, Session] = {}

    def mint(self) -> str:
        sid = secrets.token_urlsafe(32)
        with self.lock:
            self.live[sid] = Session(secrets.token_urlsafe(32), self.clock())
            while len(self.live) > self.limit:
                del self.live[next(iter(self.live))]
        return sid

    def find(self, sid: str | None) -> Session | None:
        """The live session `sid` names, touched; None when unknown or idle
        too long."""
        if not sid:
            return None
        now = self.clock()
        with self.lock:
            # A dict lookup of 256 random bits: nothing to learn from its timing.
            found = self.live.pop(sid, None) if len(sid) <= 64 else None
            if found is None or now - found.seen > self.idle:
                return None
            found.seen = now
            self.live[sid] = found  # most recently used last
            return found


class Auth:
    def __init__(self, token: str, port: int, hosts: frozenset[str], tls: bool = False,
                 sessions: Sessions | None = None) -> None:
        self.token = token
        # Two homes on two ports keep their own; `__Host-` binds it to this
        # origin under TLS (Secure, Path=/, no Domain).
        self.cookie_name = ("__Host-" if tls else "") + f"loopctl_{port}"
        self.hosts = hosts
        self.sessions = sessions or Sessions()

    def _same(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def caller(self, headers: dict[str, str], path: str) -> Caller:
        scheme, _, value = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and self._same(value.strip()):
            return Caller("bearer")
        if path.startswith(NOT_FOR_SESSIONS) and path not in PAGE_FEEDS:
            return Caller(None)
        found = self.sessions.find(cookie_value(headers.get("cookie", ""), self.cookie_name))
        return Caller("session", found.csrf) if found is not None else Caller(None)

    def query_token_ok(self, query: str) -> bool:
        return self._same(dict(parse_qsl(query)).get("token"))

    @staticmethod
    def csrf_ok(caller: Caller, given: str | None) -> bool:
        return bool(caller.csrf) and given is not None and hmac.compare_digest(
            given.encode(), caller.csrf.encode())

    def host_ok(self, host: str | None) -> bool:
        return host is not None and host.strip().lower() in self.hosts

    def set_cookie(self, secure: bool) -> str:
        """A new session's cookie."""
        return (f"{self.cookie_name}={self.sessions.mint()}; Path=/; HttpOnly; "
                "SameSite=Strict" + ("; Secure" if secure else ""))


def cookie_value(header: str, name: str) -> str | None:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


def without_token(raw_path: str, query: str) -> str | None:
    """The same page without `?token=` (the token must not stay in the
    address bar, the history or a Referer), from the path as sent, still
    %-encoded: `/%2F%2Fevil.example` stays one path on this server and never
    becomes `//evil.example`. None when it cannot be a Location: not one
    absolute path, or a control character anywhere."""
    rest = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "token"]
    location = raw_path + ("?" + urlencode(rest) if rest else "")
    if not raw_path.startswith("/") or raw_path.startswith("//") or "\\" in raw_path \
            or any(ord(c) < 0x21 or ord(c) == 0x7f for c in location):
        return None
    return location


def allowed_hosts(bind_host: str, port: int, extra: list[str]) -> frozenset[str]:
    """The `Host` values a request may name: the bound address, loopback's
    other names when bound to loopback, and each `--allowed-host` (with or
    without the port)."""
    names = {bind_host.lower()}
    if bind_host in LOOPBACK or bind_host in WILDCARD:
        names.update(LOOPBACK)
    if bind_host in WILDCARD:  # every address of this machine: its name too
        import socket

        names.add(socket.gethostname().lower())
    if ":" in bind_host and not bind_host.startswith("["):
        names.add(f"[{bind_host.lower()}]")
    hosts = {f"{name}:{port}" for name in names}
    for item in extra:
        item = item.strip().lower()
        host, sep, tail = item.rpartition(":")
        if sep and tail.isascii() and tail.isdigit() and not host.endswith(":"):
            hosts.add(item)
        else:  # no port given: this one, or the default one behind a proxy
            hosts.update({item, f"{item}:{port}"})
    return frozenset(hosts)
