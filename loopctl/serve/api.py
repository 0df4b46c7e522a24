"""What the API and the pages read and do, through the commands layer the
CLI uses (no second implementation of a view, the CLI's messages), and how
the CLI's exit codes become HTTP statuses (DESIGN §19): no such loop 404,
not active (or busy) 409, bad input 422, files unreadable 503.
"""

from __future__ import annotations

from typing import Any

from loopctl.commands import common
from loopctl.commands import views as reading
from loopctl.domain.errors import (
    EXIT_BUSY,
    EXIT_NO_SUCH_LOOP,
    EXIT_UNREADABLE,
    EXIT_USAGE,
    LoopctlError,
    UsageError,
)
from loopctl.storage.store import Store

VERBS = ("pause", "resume", "stop", "run", "trigger")


class BadInput(UsageError):
    """Input the request itself got wrong (422), not a refusal by the loop."""


def http_status(exc: LoopctlError) -> int:
    if isinstance(exc, BadInput):
        return 422
    return {EXIT_NO_SUCH_LOOP: 404, EXIT_USAGE: 409, EXIT_BUSY: 409,
            EXIT_UNREADABLE: 503}.get(exc.code, 500)


def loops(store: Store) -> dict[str, Any]:
    """`ls --json`."""
    with common.no_cycle_collection():
        return {"version": common.JSON_VERSION, "loops": reading.list_loops(store)}


def loop(store: Store, name: str) -> dict[str, Any]:
    """`status NAME --json`."""
    with common.no_cycle_collection():
        return reading.status(store, name).to_json()


def runs(store: Store, name: str, limit: int = 20) -> dict[str, Any]:
    """`history NAME --json [--limit N]`."""
    return reading.runs_of(store, name, limit).to_json()


def parse_limit(text: str | None, default: int = 20) -> int:
    if text is None:
        return default
    if not (text.isascii() and text.isdigit()) or int(text) > 100_000:
        raise BadInput(f"bad limit {text[:20]!r}: expected a whole number from 0 to 100000")
    return int(text)


class Actions:
    """pause, resume, stop (`--kill`), run now, trigger: the CLI's semantics."""

    def __init__(self, store_factory: Any) -> None:
        self.store = store_factory

    def act(self, name: str, verb: str, payload: bytes | None = None,
            kill: bool = False) -> dict[str, Any]:
        from loopctl.commands.control import control

        if verb == "resume" and payload:
            return control(self.store(), name, verb,
                           answer=self.text(payload, "--answer")).to_json()
        if verb in ("pause", "resume", "stop"):
            return control(self.store(), name, verb, kill=kill).to_json()
        if verb == "trigger":
            return self.trigger(name, payload)
        if verb == "run":
            return self.run(name)
        raise BadInput(f"no such action {verb!r}: expected one of {', '.join(VERBS)}")

    def trigger(self, name: str, payload: bytes | None) -> dict[str, Any]:
        from loopctl.commands.trigger import trigger

        return trigger(self.store(), name, self.text(payload) if payload else None).to_json()

    @staticmethod
    def text(data: bytes, what: str = "--payload") -> str:
        """A payload or an answer as text, or BadInput (422) saying why not."""
        from loopctl.domain.gates import check_payload

        try:
            return check_payload(data, what)
        except UsageError as exc:
            raise BadInput(exc.message) from None

    def run(self, name: str) -> dict[str, Any]:
        """`loopctl run NAME` without waiting: claimed here with its refusals
        and messages, supervised by a process of its own, as a driver does."""
        from loopctl.commands.drivers import claim_now

        store = self.store()
        run_id, _ = claim_now(store, name, "api", spawn=lambda rid: self._spawn(store, name, rid))
        return {"version": common.JSON_VERSION, "loop": name, "run_id": run_id,
                "message": f"started run {run_id}",
                "log": str(store.paths.run_log(name, run_id))}

    def _spawn(self, store: Store, name: str, run_id: str) -> int:
        # a fresh interpreter, not a fork: this server runs threads
        from loopctl.engine.firing import start_supervisor

        return start_supervisor(store, name, run_id)
