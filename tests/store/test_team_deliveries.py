"""GitHub deliveries in the team store (DESIGN §21, issue 54): two machines'
`serve`s behind one load balancer share what they have seen, so a delivery
(or GitHub's redelivery, or its body under a new id) reaching the second
fires nothing there; two copies at once fire once; a redelivery fires only
what an interrupted first attempt did not; a store that cannot be reached
fires nothing (503, said once in the log); and another machine's daemon
fires the triggered loop within a second. Real `loopctl serve` and
`daemon` processes, a real server; every wait polls with a deadline."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from serve.support import SECRET, Served, serving

from conftest import wait_for
from store.machines import Machine, machines
from store.proxy import Proxy

pytestmark = pytest.mark.real_processes

HOOKED = """\
version: 1
store: {dsn}
loops:
  hooked:
    prompt: echo $LOOPCTL_RUN_ID >> {ran}
    agent: shell
    on_demand: true
    cwd: {cwd}
    timeout: 1m
    max_runs: 1000
    on_github: [check_suite.completed]
  other:
    prompt: echo $LOOPCTL_RUN_ID >> {ran}-other
    agent: shell
    on_demand: true
    cwd: {cwd}
    timeout: 1m
    max_runs: 1000
    on_github: [check_suite.completed]
"""
CONTRACT = 1.0  # seconds from a trigger on one machine to another's daemon waking


def completed(n: int) -> dict[str, Any]:
    """A check_suite.completed payload; `n` makes its body (and digest) its own."""
    return {"action": "completed", "repository": {"full_name": "o/r"}, "check_suite": {"id": n}}


def triggered(dsn: str, loop: str = "hooked") -> int:
    """How many triggers the team's state counts for `loop`."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT entry FROM loopctl.loop_state WHERE loop = %s",
                           (loop,)).fetchone()
    found = (row[0] or {}).get("triggered") if row else None
    return int(found["count"]) if isinstance(found, dict) else 0


def team(tmp_path: Path, dsn: str, count: int = 2) -> list[Machine]:
    ms = machines(tmp_path / "machines", count)
    for m in ms:
        m.define(HOOKED.format(dsn=dsn, ran=tmp_path / "ran", cwd=tmp_path))
    assert ms[0].run("store", "init").returncode == 0
    return ms


@pytest.fixture
def two_serves(tmp_path: Path, pg_dsn: str) -> Iterator[tuple[Served, Served]]:
    """m1's and m2's `serve`, on one store, with one webhook secret."""
    m1, m2 = team(tmp_path, pg_dsn)
    with ExitStack() as stack:
        served = [stack.enter_context(serving(m.home, env=m.env())) for m in (m1, m2)]
        yield served[0], served[1]


def test_a_delivery_seen_on_one_machine_is_a_duplicate_on_the_other(
        two_serves: tuple[Served, Served], pg_dsn: str) -> None:
    s1, s2 = two_serves
    status, said = s1.github("check_suite", completed(1), delivery="d-1")
    assert status == 202 and said["triggered"] == ["hooked", "other"], said
    status, said = s2.github("check_suite", completed(1), delivery="d-1")  # a redelivery
    assert status == 200 and said["result"] == "duplicate", said
    status, said = s2.github("check_suite", completed(1), delivery="d-9")  # a replayed body
    assert said["result"] == "duplicate", said
    status, said = s2.github("check_suite", completed(2), delivery="d-2")  # the control
    assert status == 202 and said["result"] == "triggered", said
    assert triggered(pg_dsn) == 2


def test_two_copies_at_once_on_two_machines_fire_once(
        two_serves: tuple[Served, Served], pg_dsn: str) -> None:
    """The same delivery sent to both serves at the same instant, ten times:
    each fires exactly once, whichever machine wins."""
    results: list[str] = []

    def send(served: Served, n: int, start: threading.Barrier) -> None:
        start.wait()
        results.append(served.github("check_suite", completed(100 + n),
                                     delivery=f"race-{n}")[1]["result"])

    for n in range(10):
        start = threading.Barrier(2)
        senders = [threading.Thread(target=send, args=(s, n, start)) for s in two_serves]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join(timeout=60)
    assert sorted(results) == ["duplicate"] * 10 + ["triggered"] * 10, results
    assert triggered(pg_dsn) == 10


def test_the_store_keeps_the_newest_keys_only(tmp_path: Path, pg_dsn: str) -> None:
    """Bounded: at most MAX_KEYS rows, the oldest pruned in the claim's
    transaction (a small bound here: the env sets none, so the module's own)."""
    from loopctl.storage.pg import deliveries

    team(tmp_path, pg_dsn, count=1)
    keeper = deliveries.TeamDeliveries(pg_dsn, "m1", 60.0)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO loopctl.webhook_deliveries (key, state, machine, token) "
                     "SELECT 'old-' || i, 'done', 'm0', 't' FROM generate_series(1, %s) i",
                     (deliveries.MAX_KEYS,))
        assert keeper.claim(["id:new", "sha256:new"]) == []
        keeper.settle(["id:new", "sha256:new"], None)
        count, oldest = conn.execute("SELECT count(*), min(key) FILTER (WHERE key LIKE "
                                     "'old-1') FROM loopctl.webhook_deliveries").fetchone()
        state = conn.execute("SELECT state FROM loopctl.webhook_deliveries "
                             "WHERE key = 'id:new'").fetchone()
    keeper.close()
    assert count == deliveries.MAX_KEYS and oldest is None and state == ("done",)


class FailsOnce:
    """The real trigger, but `other`'s first call fails as a busy store does."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, store: Any, name: str, payload: str) -> Any:
        from loopctl.commands.trigger import trigger
        from loopctl.domain.errors import BusyError

        self.calls.append(name)
        if name == "other" and self.calls.count("other") == 1:
            raise BusyError("the store is busy")
        return trigger(store, name, payload)


def test_a_redelivery_on_another_machine_fires_only_what_did_not_fire(
        tmp_path: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """m1's first attempt fires `hooked`, then fails on `other` (503);
    GitHub's redelivery lands on m2: it fires `other` only."""
    from loopctl.serve.hooks import GithubHooks, deliveries_of
    from loopctl.storage.store import Store

    m1, m2 = team(tmp_path, pg_dsn)
    body = json.dumps(completed(7)).encode()
    headers = signed(SECRET, body, "d-7")
    flaky = FailsOnce()
    answers = []
    for machine in (m1, m2):
        for key, value in machine.env().items():
            monkeypatch.setenv(key, value)
        hooks = GithubHooks(Store, SECRET, deliveries_of(Store()))
        hooks.trigger = flaky
        answers.append(hooks.receive(headers, body))
    assert answers[0][0] == 503 and answers[0][1]["triggered"] == ["hooked"], answers
    assert answers[1][0] == 202 and answers[1][1]["triggered"] == ["other"], answers
    assert flaky.calls == ["hooked", "other", "other"]
    assert (triggered(pg_dsn), triggered(pg_dsn, "other")) == (1, 1)


def signed(secret: bytes, body: bytes, delivery: str) -> dict[str, str]:
    import hashlib
    import hmac

    return {"x-github-event": "check_suite", "x-github-delivery": delivery,
            "x-hub-signature-256": "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()}


def test_a_store_down_fires_nothing_answers_503_and_says_so_once(
        tmp_path: Path, pg_dsn: str, proxy: Proxy) -> None:
    parts = urlsplit(pg_dsn)
    dsn = parts._replace(netloc=f"{parts.username}@127.0.0.1:{proxy.port}").geturl()
    [m1] = team(tmp_path, dsn, count=1)
    with serving(m1.home, env=m1.env()) as served:
        proxy.cut()
        for n in (1, 2):
            status, said = served.github("check_suite", completed(n), delivery=f"d-{n}")
            assert status == 503 and said["result"] == "error" and not said["triggered"], said
            assert "unreachable" in said["error"], said
        proxy.mend()
        status, said = served.github("check_suite", completed(1), delivery="d-1")
        assert status == 202 and said["result"] == "triggered", said  # nothing was kept
        log = (m1.home / "serve.stderr").read_text()
    assert log.count("github deliveries not fired while the team store is down") == 1, log
    assert "fire again" in log and triggered(pg_dsn) == 1


def test_another_machines_daemon_fires_the_delivery_within_a_second(
        tmp_path: Path, pg_dsn: str) -> None:
    """m2's serve takes the delivery; m1's daemon, woken by the store,
    starts the run."""
    m1, m2 = team(tmp_path, pg_dsn)
    log = tmp_path / "daemon.log"
    with open(log, "w") as out:
        daemon = subprocess.Popen(m1.argv("daemon"), stdout=out, stderr=out, env=m1.env())
    try:
        wait_for(lambda: "listening for wakes on store" in log.read_text(), timeout=30)
        with serving(m2.home, env=m2.env()) as served:
            status, said = served.github("check_suite", completed(3), delivery="d-3")
            answered = time.monotonic()
            assert status == 202, said
            wait_for(lambda: "woken by the store for hooked" in log.read_text(),
                     timeout=30, interval=0.005)
            latency = time.monotonic() - answered
            wait_for(lambda: (tmp_path / "ran").exists(), timeout=30)
        assert latency < CONTRACT, latency
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)


def test_a_serve_whose_link_the_server_dropped_still_fires(tmp_path: Path, pg_dsn: str,
                                                           pg_cluster: Any) -> None:
    """serve keeps its connection for deliveries; the server restarted
    since (its link is dead, unknown to serve until used): the next
    delivery connects afresh and fires, rather than answering 503."""
    [m1] = team(tmp_path, pg_dsn, count=1)
    with serving(m1.home, env=m1.env()) as served:
        assert served.github("check_suite", completed(1), delivery="d-1")[0] == 202
        pg_cluster.restart()
        status, said = served.github("check_suite", completed(2), delivery="d-2")
    assert status == 202 and said["result"] == "triggered", said
    assert triggered(pg_dsn) == 2
