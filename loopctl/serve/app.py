"""Routes: who may ask what, and which part answers.

Pages (`/`, `/loops/NAME`, `/doctor`) and their form actions; the API
(`/api/...`), `/metrics`, the webhooks (`/hooks/...`) and the live stream
(`/api/events`). Every request must name an allowed `Host`; every request
but a signed GitHub delivery needs the bearer token or, for pages, their
forms and their live stream, a browser session; a session's POST also
needs the session's CSRF token, which its pages' forms carry.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from typing import Any
from urllib.parse import parse_qsl

from loopctl import clock
from loopctl.domain.errors import LoopctlError
from loopctl.domain.names import is_loop_name
from loopctl.serve import api
from loopctl.serve.auth import Auth, without_token
from loopctl.serve.drivers import DriverWatch
from loopctl.serve.hooks import GithubHooks, deliveries_of, describe_delivery
from loopctl.serve.metrics import Metrics
from loopctl.serve.server import Request, Response, error
from loopctl.storage.store import Store

LOOP_ROUTE = re.compile(r"/(api/)?loops/([^/]+)(?:/([a-z]+)(?:/([^/]+))?)?")
STATE_CHANGING = ("POST",)
TEXT = "text/plain; charset=utf-8"
HTML = "text/html; charset=utf-8"


def as_json(status: int, data: Any, headers: list[tuple[str, str]] | None = None) -> Response:
    # Compact: the C encoder (`indent` would take the pure-Python one).
    body = json.dumps(data, separators=(",", ":"), default=str, allow_nan=False).encode()
    body += b"\n"
    return Response(status, body, headers=headers or [])


class App:
    def __init__(self, auth: Auth, secret: bytes | None, quiet: bool = False,
                 in_daemon: bool = False) -> None:
        self.auth = auth
        self.quiet = quiet
        self.stopping = False
        self.actions = api.Actions(Store)
        probe = Store()
        self.hooks = GithubHooks(Store, secret, deliveries_of(probe))
        self.hooks.log = self.log
        self.metrics = Metrics(self.hooks.counts)
        self.drivers = DriverWatch(in_daemon)
        # Beside a daemon, pages are rendered one at a time: the driver's
        # thread shares the interpreter lock with them, and a fire must not
        # wait behind a crowd of renders (bench/serve.py, lateness under load).
        self.renders = threading.BoundedSemaphore(1 if in_daemon else 8)
        self.local = threading.local()  # the caller's CSRF token, per request thread

    def log(self, message: str) -> None:
        if not self.quiet:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime())
            print(f"{stamp} loopctl serve: {message}", file=sys.stderr, flush=True)

    def log_request(self, client: str, said: str) -> None:
        self.log(f"{client} {said}")

    def admit(self, request: Request) -> Response | None:
        """Before a byte of body is read: the answer for a request whose
        Host, route or credentials do not allow one, or None. A POST's body
        is read only on a route that takes one, after the bearer token (or a
        page form's session) or a well-formed GitHub signature header."""
        if not self.auth.host_ok(request.headers.get("host")):
            return self.handle(request)
        if request.method != "POST":
            return None  # no body is read
        path = request.path
        if path == "/hooks/github":
            refused = self.hooks.refuse(request.headers)
            return as_json(*refused) if refused is not None else None
        if not (path.startswith("/hooks/trigger/") or LOOP_ROUTE.fullmatch(path)):
            return self._failed(request, 404, "nothing to post to here")
        if self.auth.caller(request.headers, path).via is None:
            return self._unauthorized(request)
        return None

    def body_mac(self, request: Request) -> Any:
        """The HMAC a body streams into (a GitHub delivery's), or None."""
        return self.hooks.mac() if request.path == "/hooks/github" else None

    def unsigned(self, request: Request, mac: Any) -> Response | None:
        """A 401 when the streamed body's HMAC is not its signature."""
        import hmac

        given = request.headers.get("x-hub-signature-256", "").strip()
        if hmac.compare_digest(("sha256=" + mac.hexdigest()).encode(), given.encode()):
            return None
        self.hooks.counts["bad_signature"] += 1
        return as_json(401, {"result": "bad_signature",
                             "error": "missing or wrong X-Hub-Signature-256"})

    def handle(self, request: Request) -> Response:
        if not self.auth.host_ok(request.headers.get("host")):
            return error(403, "this Host is not served here (give --allowed-host to serve it)")
        try:
            with self.renders:
                return self._route(request)
        except LoopctlError as exc:
            return self._failed(request, api.http_status(exc), exc.message)

    def _failed(self, request: Request, status: int, message: str) -> Response:
        if request.path.startswith(("/api/", "/hooks/", "/metrics")):
            return error(status, message)
        from loopctl.serve import pages

        return Response(status, pages.error_page(status, message), HTML)

    def _route(self, request: Request) -> Response:
        path = request.path
        if path == "/hooks/github" and request.method == "POST":
            return self._github(request)
        caller = self.auth.caller(request.headers, path)
        if request.method in ("GET", "HEAD") and "token" in dict(parse_qsl(request.query)):
            return self._log_in(request)
        if caller.via is None:
            return self._unauthorized(request)
        self.local.csrf = caller.csrf
        if request.method in STATE_CHANGING and caller.via == "session" \
                and not self.auth.csrf_ok(caller, self._csrf_of(request)):
            return self._failed(request, 403, "missing or wrong CSRF token: reload the page "
                                "and try again")
        return self._authorized(request)

    def _log_in(self, request: Request) -> Response:
        """The token, once, from the printed URL: a new session's cookie,
        and the same page again without the token."""
        if not self.auth.query_token_ok(request.query):
            return self._unauthorized(request)
        location = without_token(request.raw_path, request.query)
        if location is None:
            return self._failed(request, 400, "this address cannot be redirected to")
        return Response(303, headers=[("Location", location),
                                      ("Set-Cookie", self.auth.set_cookie(request.secure))])

    def page_csrf(self) -> str:
        """The CSRF token for the forms of the page being rendered (the
        session's; none for a bearer caller, who needs none)."""
        return str(getattr(self.local, "csrf", ""))

    def _unauthorized(self, request: Request) -> Response:
        headers = [("WWW-Authenticate", 'Bearer realm="loopctl"')]
        if request.path.startswith(("/api/", "/hooks/", "/metrics")):
            return error(401, "no or wrong token: send Authorization: Bearer TOKEN "
                         "(the token is in serve.token in the state folder)", headers)
        from loopctl.serve import pages

        return Response(401, pages.login_page(), HTML, headers=headers)

    @staticmethod
    def _csrf_of(request: Request) -> str | None:
        if request.headers.get("x-csrf-token"):
            return request.headers["x-csrf-token"]
        if request.headers.get("content-type", "").startswith(
                "application/x-www-form-urlencoded"):
            form = dict(parse_qsl(request.body.decode("utf-8", "replace")))
            return form.get("csrf")
        return None

    def _authorized(self, request: Request) -> Response:
        path, method = request.path, request.method
        if method == "POST" and path.startswith("/hooks/trigger/"):
            return self._act(request, path.removeprefix("/hooks/trigger/"), "trigger", True)
        if method not in ("GET", "HEAD", "POST"):
            return error(405, "method not allowed")
        if path == "/metrics" and method != "POST":
            return self._metrics()
        if path == "/api/events" and method != "POST":
            from loopctl.serve.live import stream

            return stream(self)
        if path.startswith("/static/") and method != "POST":
            from loopctl.serve import pages

            return pages.static(path.removeprefix("/static/"))
        matched = LOOP_ROUTE.fullmatch(path)
        if matched:
            return self._loop_route(request, matched)
        if method == "POST":
            return error(404, "nothing to post to here")
        return self._page_or_api(request)

    def _page_or_api(self, request: Request) -> Response:
        store = Store()
        if request.path == "/api/loops":
            return as_json(200, api.loops(store))
        from loopctl.serve import pages

        if request.path == "/":
            return Response(200, pages.overview(store, self), HTML)
        if request.path == "/timeline":
            from loopctl.serve import overview

            return Response(200, overview.timeline(store, self), HTML)
        if request.path == "/doctor":
            return Response(200, pages.doctor(store, self), HTML)
        return self._failed(request, 404, "no such page")

    def _loop_route(self, request: Request, matched: re.Match[str]) -> Response:
        is_api, name, verb = bool(matched.group(1)), matched.group(2), matched.group(3)
        if not is_loop_name(name):
            from loopctl.domain.errors import NoSuchLoop

            raise NoSuchLoop(name[:100])
        if request.method == "POST":
            if matched.group(4):
                return self._failed(request, 404, "nothing to post to here")
            return self._act(request, name, verb or "", is_api)
        store = Store()
        if is_api and verb is None:
            return as_json(200, api.loop(store, name))
        if is_api and verb == "runs":
            limit = api.parse_limit(dict(parse_qsl(request.query)).get("limit"))
            return as_json(200, api.runs(store, name, limit))
        if not is_api and verb is None:
            from loopctl.serve import pages

            return Response(200, pages.loop_page(store, self, name, request.query), HTML)
        if not is_api and verb == "runs" and matched.group(4):
            return self._run_file(store, name, matched.group(4), request.query)
        return self._failed(request, 404, "no such page")

    @staticmethod
    def _run_file(store: Store, name: str, run_id: str, query: str) -> Response:
        """One run as a file that reads the same saved: its style inline,
        allowed by its hash alone."""
        import base64
        import hashlib

        from loopctl.serve.run_page import run_page

        body = run_page(store, name, run_id)
        style = body.split(b"<style>", 1)[1].split(b"</style>", 1)[0]
        digest = base64.b64encode(hashlib.sha256(style).digest()).decode()
        headers = [("Content-Security-Policy", f"default-src 'none'; style-src 'sha256-{digest}'; "
                    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'")]
        if dict(parse_qsl(query)).get("download") == "1":
            headers.append(("Content-Disposition",
                            f'attachment; filename="{name}-{run_id}.html"'))
        return Response(200, body, HTML, headers=headers)

    def _act(self, request: Request, name: str, verb: str, is_api: bool) -> Response:
        if verb not in api.VERBS:
            return self._failed(request, 404, f"no such action {verb[:40]!r}")
        form = {} if is_api else dict(parse_qsl(request.body.decode("utf-8", "replace")))
        field = "answer" if verb == "resume" else "payload"
        payload = request.body if is_api else form.get(field, "").encode() or None
        kill = (dict(parse_qsl(request.query)) if is_api else form).get("kill") in ("1", "true")
        try:
            result = self.actions.act(name, verb, payload if verb in ("trigger", "resume")
                                      else None, kill)
        except LoopctlError as exc:
            if is_api:
                return error(api.http_status(exc), exc.message)
            from loopctl.serve import pages

            return Response(api.http_status(exc),
                            pages.loop_page(Store(), self, name, "", said=exc.message,
                                            failed=True), HTML)
        if verb in ("trigger", "run"):  # `driver`, if any, is trigger --json's own
            result["driver_note"] = self.drivers.missing(Store())
            if self.drivers.in_daemon and result.get("driver") == "none":
                # This process's daemon fires it: it had not taken the lease yet
                # (a request in the first moment of `daemon --serve`).
                result["driver"], result["driver_pid"] = "daemon", os.getpid()
        self.log(f"{verb} {name}: {result.get('message') or 'accepted'}")
        if is_api:
            return as_json(202 if verb in ("trigger", "run") else 200, result)
        from loopctl.serve import pages

        said = result.get("message") or pages.trigger_said(result)
        return Response(200, pages.loop_page(Store(), self, name, "", said=said), HTML)

    def _github(self, request: Request) -> Response:
        status, answer = self.hooks.receive(request.headers, request.body, request.digest)
        if not answer.pop("said", False):  # a store outage is said once, not per delivery
            self.log(describe_delivery(answer))
        if answer.get("triggered"):
            answer["driver_note"] = self.drivers.missing(Store())
        return as_json(status, answer)

    def _metrics(self) -> Response:
        from loopctl.domain.accounts import clean_table, holding

        store = Store()
        listed = api.loops(store)["loops"]
        now = clock.now()
        state = store.read_state()
        table = clean_table(state.get("accounts"))
        held = [entry for entry in table.values() if holding(entry, now)]
        text = self.metrics.render(store, listed, now, held, state["loops"])
        return Response(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")
