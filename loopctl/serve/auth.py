"""Who may come in (DESIGN §19): the home's token, the browser's cookie,
the CSRF token of its forms, and the `Host` a request names.

The token travels as `Authorization: Bearer TOKEN` (API, metrics, the
generic webhook) or, for a browser, once as `?token=` in the URL `serve`
prints, which sets an HttpOnly, SameSite=Strict cookie and redirects to the
same page without it. Every comparison is constant-time. A state-changing
request authenticated by the cookie also needs the CSRF token its form
carries (derived from the home's token, so a restart keeps open pages
working); a bearer-authenticated or signed request does not, since a
browser never adds those on its own.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import parse_qsl, urlencode

from loopctl.domain.data_class import record

LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
WILDCARD = ("0.0.0.0", "::")


@record(frozen=True)
class Caller:
    """How a request proved itself: `bearer`, `cookie`, or None."""

    via: str | None


class Auth:
    def __init__(self, token: str, port: int, hosts: frozenset[str]) -> None:
        self.token = token
        self.cookie_name = f"loopctl_{port}"  # two homes on two ports keep their own
        self.hosts = hosts
        self.csrf = hmac.new(token.encode(), b"loopctl serve csrf", hashlib.sha256).hexdigest()

    def _same(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def caller(self, headers: dict[str, str]) -> Caller:
        scheme, _, value = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and self._same(value.strip()):
            return Caller("bearer")
        if self._same(cookie_value(headers.get("cookie", ""), self.cookie_name)):
            return Caller("cookie")
        return Caller(None)

    def query_token_ok(self, query: str) -> bool:
        return self._same(dict(parse_qsl(query)).get("token"))

    def csrf_ok(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.csrf.encode())

    def host_ok(self, host: str | None) -> bool:
        return host is not None and host.strip().lower() in self.hosts

    def set_cookie(self, secure: bool) -> str:
        return (f"{self.cookie_name}={self.token}; Path=/; HttpOnly; SameSite=Strict"
                + ("; Secure" if secure else ""))


def cookie_value(header: str, name: str) -> str | None:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


def without_token(path: str, query: str) -> str:
    """The same page without `?token=`: the token must not stay in the
    address bar, the history or a Referer."""
    rest = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "token"]
    return path + ("?" + urlencode(rest) if rest else "")


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
