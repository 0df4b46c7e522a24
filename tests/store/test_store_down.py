"""Failing closed (DESIGN §21): with the store unreachable nothing fires; a
running daemon says so once, retries with backoff, and fires again when the
store is back. The link is cut by a proxy the test stops (tests/store/proxy.py),
which also counts the daemon's attempts to reconnect."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from conftest import wait_for
from store.machines import machines
from store.proxy import Proxy

pytestmark = pytest.mark.real_processes

EVERY = """\
version: 1
store: {dsn}
loops:
  often:
    prompt: echo $LOOPCTL_RUN_ID >> {ran}
    agent: shell
    every: 1s
    cwd: {cwd}
    timeout: 1m
    max_runs: 1000
"""


def runs(ran: Path) -> int:
    return len(ran.read_text().splitlines()) if ran.exists() else 0


def through_proxy(tmp_path: Path, pg_dsn: str, proxy: Proxy) -> tuple[Any, Path, Path]:
    """One machine whose store is reached through `proxy` (so a test can
    cut the link), its schema made; the file its runs note themselves in,
    and its daemon's log."""
    parts = urlsplit(pg_dsn)
    dsn = parts._replace(netloc=f"{parts.username}@127.0.0.1:{proxy.port}").geturl()
    [m1] = machines(tmp_path / "machines", 1)
    ran, log = tmp_path / "ran", tmp_path / "daemon.log"
    m1.define(EVERY.format(dsn=dsn, ran=ran, cwd=tmp_path))
    assert m1.run("store", "init").returncode == 0
    return m1, ran, log


@pytest.mark.slow
def test_a_daemon_stops_firing_while_the_store_is_cut_and_says_so_once(
        tmp_path: Path, pg_dsn: str, proxy: Proxy) -> None:
    m1, ran, log = through_proxy(tmp_path, pg_dsn, proxy)
    with open(log, "w") as out:
        daemon = subprocess.Popen(m1.argv("daemon"), stdout=out, stderr=out, env=m1.env())
    try:
        wait_for(lambda: runs(ran) >= 1, timeout=30)
        proxy.cut()
        wait_for(lambda: "not firing: store" in log.read_text(), timeout=30)
        before = runs(ran)
        # Two more tries (after 1 and 2 s of backoff) meet the store still cut.
        assert proxy.wait_refused(proxy.refused + 2, timeout=30)
        text = log.read_text()
        assert text.count("not firing") == 1, text
        assert runs(ran) == before and daemon.poll() is None
        proxy.mend()
        wait_for(lambda: "firing resumes" in log.read_text(), timeout=30)
        wait_for(lambda: runs(ran) > before, timeout=30)
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)


def test_a_daemon_started_while_the_store_is_down_waits_for_it(
        tmp_path: Path, pg_dsn: str, proxy: Proxy) -> None:
    """A machine that boots before the database: its daemon runs, fires
    nothing, says why once, and fires when the store answers."""
    m1, ran, log = through_proxy(tmp_path, pg_dsn, proxy)
    proxy.cut()
    with open(log, "w") as out:
        daemon = subprocess.Popen(m1.argv("daemon"), stdout=out, stderr=out, env=m1.env())
    try:
        wait_for(lambda: "not firing: store" in log.read_text(), timeout=30)
        assert proxy.wait_refused(proxy.refused + 1, timeout=30)
        assert runs(ran) == 0 and daemon.poll() is None
        assert log.read_text().count("not firing") == 1, log.read_text()
        proxy.mend()
        wait_for(lambda: runs(ran) >= 1, timeout=30)
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
