"""A long-running `loopctl serve` keeps its memory flat: start-up turns the
cyclic collector off (loopctl.entry), and a process that lives long turns it
back on (loopctl/collector.py); each connection leaves cycles (its thread,
its watchdog timer), 6-10 KiB of them, kept for good with the collector off."""

from __future__ import annotations

import http.client
from pathlib import Path

import pytest

from .support import Served, serving


def rss_kib(pid: int) -> int:
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("VmRSS:"):
            return int(row.split()[1])
    raise AssertionError("no VmRSS")


def hit(served: Served, count: int, token: bool) -> None:
    """`count` requests, each on a connection of its own (as a poller's)."""
    headers = {"Authorization": f"Bearer {served.token}"} if token else {}
    for _ in range(count):
        conn = http.client.HTTPConnection(served.host, served.port, timeout=30)
        try:
            conn.request("GET", "/api/loops" if token else "/", headers=headers)
            conn.getresponse().read()
        finally:
            conn.close()


@pytest.mark.slow
def test_serve_memory_stays_flat_over_thousands_of_connections(tmp_path: Path) -> None:
    with serving(tmp_path, secret=False) as served:
        hit(served, 300, token=False)  # warm-up: caches, the thread pool's high water
        hit(served, 100, token=True)
        before = rss_kib(served.proc.pid)
        for _ in range(2):
            hit(served, 800, token=False)
            hit(served, 200, token=True)
        grown = rss_kib(served.proc.pid) - before
    # With the collector off: 6-10 KiB a connection, 12-20 MiB here.
    assert grown < 4 * 1024, f"grew {grown} KiB over 2,000 connections"
