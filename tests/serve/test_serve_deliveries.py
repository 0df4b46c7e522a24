"""What a GitHub delivery fired is remembered (DESIGN §19): a delivery
answered 503 after it triggered one loop is redelivered by GitHub, and that
redelivery (same id, or same body under a new id) fires only the loops the
first attempt did not; a restart keeps it."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from conftest import CLI, agent_command
from loopctl.domain.errors import BusyError
from loopctl.serve.hooks import GithubHooks
from loopctl.storage.serve_files import Deliveries
from loopctl.storage.store import Store

SECRET = b"s3cret"


def signed(body: bytes, delivery: str) -> dict[str, str]:
    return {"x-github-event": "check_suite", "x-github-delivery": delivery,
            "x-hub-signature-256": "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()}


class Flaky:
    """The real trigger, but `second`'s first call fails like a busy store."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.failed = False

    def __call__(self, store: Store, name: str, payload: str) -> Any:
        from loopctl.commands.trigger import trigger

        self.calls.append(name)
        if name == "second" and not self.failed:
            self.failed = True
            raise BusyError("the store is busy")
        return trigger(store, name, payload)


def hooks(flaky: Flaky) -> GithubHooks:
    made = GithubHooks(Store, SECRET, Deliveries(Store().paths))
    made.trigger = flaky
    return made


def test_a_503_after_a_fire_remembers_what_fired(cli: CLI) -> None:
    for name in ("first", "second"):
        cli("start", "p", "--name", name, "--on-demand", "--command", agent_command(),
            "--on-github", "check_suite.completed", check=0)
    body = json.dumps({"action": "completed", "repository": {"full_name": "o/r"}}).encode()
    flaky = Flaky()
    status, said = hooks(flaky).receive(signed(body, "d-1"), body)
    assert status == 503 and said["triggered"] == ["first"], said
    restarted = hooks(flaky)  # a new server, the same state folder
    status, said = restarted.receive(signed(body, "d-1"), body)
    assert status == 202 and said["triggered"] == ["second"], said
    assert flaky.calls == ["first", "second", "second"], "first is not fired again"
    for delivery in ("d-1", "d-2"):
        status, said = restarted.receive(signed(body, delivery), body)
        assert said["result"] == "duplicate", said
    counts = {n: cli.state()["loops"][n]["triggered"]["count"] for n in ("first", "second")}
    assert counts == {"first": 1, "second": 1}
