"""Waking across machines through the team store (issue 54, DESIGN §21).

1. Latency: machine A's daemon (a store home) LISTENs; this process plays
   machine B and sends `NOTIFY loopctl_wake` on a connection of its own,
   `--wakes` times, 0.3 s apart (more than the daemon's 0.2 s flood gap). A
   wake is timed from just before B's statement is sent to the moment A's
   stderr line `woken by the store for ...` (said as the pass starts) is
   read here. Goal: median < 200 ms, max < 1 s.
2. End to end: B runs `loopctl trigger` (a process, its gate, its write, its
   notify) and A's line is awaited: what a person on B waits for.
3. Idle: A's daemon with a short lease (a heartbeat a second) reaches the
   store through a counting proxy (tests/store/proxy.py); over `--idle`
   seconds, how many bytes it sent (every query is some) and how old its
   session's last statement is (pg_stat_activity.state_change).

The server is started as the tests start it (tests/store/pg_cluster.py).
Times are printed, never asserted.

    python bench/store_wake.py [--wakes N] [--idle SECONDS]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from _common import Workspace, env_for, header, loopctl, result

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

HOME = """version: 1
store: {dsn}
loops:
  b:
    command: ["true"]
    prompt: bench
    on_demand: true
    cwd: {cwd}
    timeout: 1h
    max_runs: 100000
"""


class Lines:
    """A daemon's stderr, each line stamped (monotonic) as it is read."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.seen: list[tuple[float, str]] = []
        self.cond = threading.Condition()
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            with self.cond:
                self.seen.append((time.monotonic(), line.rstrip("\n")))
                self.cond.notify_all()

    def wait(self, words: str, after: int = 0, timeout: float = 30) -> float:
        """When a line holding `words` was read (among lines from `after` on)."""
        def found() -> float | None:
            return next((at for at, line in self.seen[after:] if words in line), None)

        with self.cond:
            if not self.cond.wait_for(lambda: found() is not None, timeout):
                raise RuntimeError(f"no line {words!r} within {timeout}s")
            return found() or 0.0


def home(root: Path, name: str, dsn: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "loops.yaml").write_text(HOME.format(dsn=dsn, cwd=folder))
    return folder


def daemon(folder: Path, machine: str, **env: str) -> tuple[subprocess.Popen[str], Lines]:
    proc = subprocess.Popen(loopctl("daemon"), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True, env=env_for(folder, LOOPCTL_MACHINE=machine, **env))
    lines = Lines(proc)
    lines.wait("listening for wakes")
    return proc, lines


def latencies(dsn: str, lines: Lines, wakes: int) -> list[float]:
    import psycopg

    took = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(wakes):
            time.sleep(0.3)  # apart: the daemon passes at most every 0.2 s
            sent = time.monotonic()
            conn.execute("SELECT pg_notify('loopctl_wake', %s)", (f"w{i}",))
            took.append(lines.wait(f"woken by the store for w{i}") - sent)
    return took


def end_to_end(b_home: Path, lines: Lines, reps: int) -> list[float]:
    env = env_for(b_home, LOOPCTL_MACHINE="b")
    took = []
    for _ in range(reps):
        before = len(lines.seen)
        start = time.monotonic()
        subprocess.run(loopctl("trigger", "b"), env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        took.append(lines.wait("woken by the store for b", before) - start)
    return took


def idle(dsn: str, root: Path, seconds: float) -> tuple[int, float]:
    import psycopg
    from store.proxy import Proxy

    proxy = Proxy(urlsplit(dsn).port or 5432)
    proxy.start()
    parts = urlsplit(dsn)
    via = parts._replace(netloc=f"{parts.username}@127.0.0.1:{proxy.port}").geturl()
    folder = home(root, "idle", via)
    proc, lines = daemon(folder, "idle", LOOPCTL_LEASE_TTL="3")
    try:
        time.sleep(1.0)  # past start-up: its first pass, its LISTEN
        sent = proxy.sent
        time.sleep(seconds)
        sent = proxy.sent - sent
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute("SELECT extract(epoch FROM now() - state_change) FROM "
                               "pg_stat_activity WHERE query = 'LISTEN loopctl_wake'").fetchone()
        return sent, float(row[0]) if row else -1.0
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proxy.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--wakes", type=int, default=30)
    parser.add_argument("--idle", type=float, default=20.0)
    args = parser.parse_args()
    header("team store: waking across machines")
    from store.pg_cluster import pg_bin_dir, start_cluster

    bin_dir = pg_bin_dir()
    if bin_dir is None:
        sys.exit("PostgreSQL (initdb, pg_ctl) is not installed")
    cluster = start_cluster(bin_dir)
    work = Workspace("store-wake")
    try:
        dsn = cluster.dsn(cluster.new_database())
        a_home, b_home = home(work.root, "a", dsn), home(work.root, "b", dsn)
        subprocess.run(loopctl("store", "init"), env=env_for(a_home), check=True,
                       stdout=subprocess.DEVNULL)
        proc, lines = daemon(a_home, "a")
        try:
            took = latencies(dsn, lines, args.wakes)
            trig = end_to_end(b_home, lines, 10)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        sent, quiet_for = idle(cluster.dsn(cluster.new_database()), work.root,
                               args.idle)
    finally:
        cluster.stop("immediate")
        work.close()
    med, top = statistics.median(took) * 1000, max(took) * 1000
    print(f"   NOTIFY -> pass started, {len(took)} wakes: median {med:.1f} ms, "
          f"min {min(took) * 1000:.1f} ms, max {top:.1f} ms")
    print(f"   `loopctl trigger` on B -> A's pass started, {len(trig)} times: median "
          f"{statistics.median(trig) * 1000:.0f} ms, max {max(trig) * 1000:.0f} ms")
    print(f"   idle daemon, {args.idle:g} s, heartbeat every 1 s: {sent} bytes sent to the "
          f"store ({sent / args.idle:.1f} B/s), its session's last statement "
          f"{quiet_for:.0f} s old")
    result("store_wake", f"median {med:.1f} ms, max {top:.1f} ms", "median < 200 ms, max < 1 s",
           med < 200 and top < 1000, wakes=len(took), trigger_median_ms=round(
               statistics.median(trig) * 1000), idle_bytes=sent,
           idle_seconds=args.idle, idle_session_quiet_s=round(quiet_for, 1))


if __name__ == "__main__":
    main()
