"""Events from the world (DESIGN §19): `POST /hooks/github` and the generic
`POST /hooks/trigger/NAME`.

A GitHub delivery is checked against `X-Hub-Signature-256` over the raw
body, with a constant-time compare, before anything parses it; a delivery
id or body seen before fires nothing (both are kept across restarts, in the
team store when the home has one: every machine's serve shares them); then every
active loop whose `on_github` matches is triggered with the compact
summary, through the same `trigger` the CLI calls. The answer is quick: the
fire itself is the driver's.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loopctl.domain import github
from loopctl.domain.errors import LoopctlError, UsageError
from loopctl.domain.untrusted import line

if TYPE_CHECKING:
    from loopctl.storage.pg.deliveries import TeamDeliveries
    from loopctl.storage.serve_files import Deliveries

DELIVERY_RE = re.compile(r"[A-Za-z0-9-]{1,100}")
SIGNATURE_RE = re.compile(r"sha256=[0-9a-f]{64}")
EVENT_NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,49}")  # projects_v2_item
RESULTS = ("triggered", "ignored", "duplicate", "bad_signature", "bad_request", "error")


def read_secret(path: str) -> bytes:
    from loopctl.storage.paths import read_bounded

    data = read_bounded(Path(path).expanduser(), 4096)
    secret = (data or b"").strip()
    if not secret:
        raise UsageError(f"bad --github-secret-file {path[:200]!r}: expected a readable "
                         "file holding the webhook's secret")
    return secret


def signature_ok(secret: bytes, body: bytes, header: str | None) -> bool:
    if not header or not header.startswith("sha256="):
        return False
    expected = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), header.strip().encode("ascii", "replace"))


class GithubHooks:
    def __init__(self, store_factory: Any, secret: bytes | None,
                 deliveries: Deliveries | TeamDeliveries) -> None:
        self.store = store_factory
        self.secret = secret
        self.deliveries = deliveries
        self.counts: Counter[str] = Counter()
        self.trigger: Any = None  # commands.trigger.trigger unless a test gives another
        self.log: Any = lambda message: None  # the server's log (App sets it)
        self.down: str | None = None  # why the team store refuses deliveries, once said

    def receive(self, headers: dict[str, str], body: bytes,
                digest: str | None = None) -> tuple[int, dict[str, Any]]:
        status, answer = self._receive(headers, body, digest)
        self.counts[answer["result"]] += 1
        return status, answer

    def precheck(self, headers: dict[str, str]) -> tuple[int, dict[str, Any]] | None:
        """The answer a delivery gets from its headers alone, or None: its
        body is worth reading (a secret is set, the signature header is well
        formed, the event and delivery headers are ones GitHub sends)."""
        if self.secret is None:
            return 401, {"result": "bad_signature", "error": "no webhook secret is set: "
                         "start `loopctl serve --github-secret-file FILE`"}
        if not SIGNATURE_RE.fullmatch(headers.get("x-hub-signature-256", "").strip()):
            return 401, {"result": "bad_signature",
                         "error": "missing or wrong X-Hub-Signature-256"}
        if not well_formed(headers):
            return 400, {"result": "bad_request",
                         "error": "expected X-GitHub-Event and X-GitHub-Delivery headers"}
        return None

    def refuse(self, headers: dict[str, str]) -> tuple[int, dict[str, Any]] | None:
        """`precheck`, counted when it refuses."""
        refused = self.precheck(headers)
        if refused is not None:
            self.counts[refused[1]["result"]] += 1
        return refused

    def mac(self) -> hmac.HMAC:
        """The signature's HMAC, for a body streamed into it."""
        assert self.secret is not None
        return hmac.new(self.secret, digestmod=hashlib.sha256)

    def _receive(self, headers: dict[str, str], body: bytes,
                 digest: str | None) -> tuple[int, dict[str, Any]]:
        refused = self.precheck(headers)
        if refused is not None:
            return refused
        assert self.secret is not None
        if not signature_ok(self.secret, body, headers.get("x-hub-signature-256")):
            return 401, {"result": "bad_signature",
                         "error": "missing or wrong X-Hub-Signature-256"}
        delivery = headers.get("x-github-delivery", "")
        event = headers.get("x-github-event", "")
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError):
            return 400, {"result": "bad_request", "error": "the body is not JSON"}
        if not isinstance(payload, dict):
            return 400, {"result": "bad_request", "error": "the body is not a JSON object"}
        keys = [f"id:{delivery}", "sha256:" + (digest or hashlib.sha256(body).hexdigest())]
        return self._once(keys, event, delivery, payload)

    def _once(self, keys: list[str], event: str, delivery: str,
              payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Fire a delivery not seen before (by id or by body), and remember
        what fired, even when an error stops it halfway."""
        try:
            skip = self.deliveries.claim(keys)
        except LoopctlError as exc:  # the team store is down: fail closed
            return self._store_down(exc.message, delivery)
        self._store_back()
        if skip is None:
            return 200, {"result": "duplicate", "delivery": delivery,
                         "ignored": "this delivery (its id or its body) was received before"}
        fired: list[str] = list(skip)
        try:
            answer = self._fire(event, delivery, payload, fired)
        except LoopctlError as exc:
            self._settle(keys, fired, delivery)  # GitHub's redelivery fires only the rest
            return 503, {"result": "error", "error": exc.message, "triggered": fired}
        except BaseException:
            self._settle(keys, fired, delivery)
            raise
        self._settle(keys, None, delivery)
        return answer

    def _settle(self, keys: list[str], fired: list[str] | None, delivery: str) -> None:
        self.deliveries.settle(keys, fired)
        self._unsettled(delivery)

    def _store_down(self, why: str, delivery: str) -> tuple[int, dict[str, Any]]:
        """503, nothing fired (GitHub redelivers on request); said in the
        log once per outage, not once per delivery."""
        if self.down is None:
            self.log(line(f"github deliveries not fired while the team store is down: {why}; "
                          "answering 503")[:400])
        self.down = why
        # The store's address stays in this server's log: GitHub keeps the
        # answer in a delivery log every admin of the repository can read.
        return 503, {"result": "error", "delivery": delivery,
                     "error": "the team store is unreachable", "triggered": [], "said": True}

    def _store_back(self) -> None:
        if self.down is not None:
            self.down = None
            self.log("github deliveries fire again: the team store answers")

    def _unsettled(self, delivery: str) -> None:
        """A delivery fired but not recorded done (the store went down
        meanwhile): its redelivery may fire it again once its claim is stale."""
        why = getattr(self.deliveries, "unsettled", None)
        if why:
            self.log(line(f"github delivery {delivery} fired but not recorded in the team "
                          f"store: {why}")[:400])

    def _fire(self, event: str, delivery: str, payload: dict[str, Any],
              fired: list[str]) -> tuple[int, dict[str, Any]]:
        """Trigger every matching loop not in `fired` (an earlier attempt's),
        adding each to `fired` as it fires."""
        from loopctl.commands.trigger import trigger

        fire = self.trigger or trigger
        store = self.store()
        defs = store.read_defs()
        action = payload.get("action") if isinstance(payload.get("action"), str) else None
        summary = github.summary(event, delivery, payload)
        passed: dict[str, str] = {}
        before = len(fired)
        for name, loop in defs.loops.items():
            if name in fired or not github.event_matches(loop.on_github, event, action):
                continue
            why = github.refusal(event, payload, loop.github_repo, loop.github_command,
                                 loop.github_anyone)
            if why is None:
                try:
                    fire(store, name, summary)
                    fired.append(name)
                    continue
                except UsageError as exc:  # not active: said, not fired
                    why = exc.message
            passed[name] = why
        shown = f"{event}.{action}" if action else event
        if fired[before:]:
            return 202, {"result": "triggered", "delivery": delivery, "event": shown,
                         "triggered": fired[before:], "ignored_loops": passed}
        why = "no loop's on_github matches " + shown if not passed else "no loop may fire"
        return 200, {"result": "ignored", "delivery": delivery, "event": shown,
                     "ignored": why, "ignored_loops": passed}


def well_formed(headers: dict[str, str]) -> bool:
    """An event name and a delivery id GitHub could have sent."""
    return bool(EVENT_NAME_RE.fullmatch(headers.get("x-github-event", ""))
                and DELIVERY_RE.fullmatch(headers.get("x-github-delivery", "")))


def deliveries_of(store: Any) -> Deliveries | TeamDeliveries:
    """Where a home's serve remembers deliveries: the team store's rows
    when the home has one (every machine's serve shares them), else its
    state folder's file."""
    from loopctl.storage.serve_files import Deliveries

    shared = store.shared()
    if shared is None:
        return Deliveries(store.paths)
    from loopctl.settings import knob
    from loopctl.storage.pg.deliveries import TeamDeliveries

    return TeamDeliveries(shared.dsn, shared.machine, knob("LOOPCTL_STORE_STALE"))


def describe_delivery(answer: dict[str, Any]) -> str:
    """One log line for a delivery."""
    said = answer.get("triggered") or answer.get("ignored") or answer.get("error")
    return line(f"github {answer.get('event', '?')} {answer['result']}: {said}")[:300]
