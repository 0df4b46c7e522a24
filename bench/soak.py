"""Memory of the long-running processes (issue 49 item 3): RSS per 1,000
requests of a `loopctl serve`, and per 1,000 runs of a `loopctl daemon
--serve` fired while a client polls it.

Goal: <= 1 MiB of growth after warm-up, over 100,000 requests (20,000 of
them without a token) and over 10,000 runs. `--quick`: 10,000 requests
(2,000 without a token) and 500 runs, RSS printed per 1,000 requests and
per 100 runs; the goal is then scaled (it is about a leak per request or
run, and a short window hides a small one).

Requests: each on a connection of its own (a poller's), `GET /api/loops`
with the token, `GET /` without (401). Runs: 20 loops `every: 1s` whose
agent is `true`, counted from the daemon's `fired` log lines, while a
client asks for `/metrics` and `/api/loops` back to back. Warm-up: the
first 20% of the window (at least 2,000 requests / 2 steps of runs); RSS is
VmRSS of the server's process.

`--store`: the same in a team-store home (DESIGN §21; a local PostgreSQL
started as the tests start it, tests/store/pg_cluster.py): every fire claims
its slot, renews and records in the store, and `serve` reads the team's
view through it. Also sampled: the server's sessions of this database
(`pg_stat_activity`), which a connection left open per run or request would
grow by one each.
"""

from __future__ import annotations

import argparse
import http.client
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from _common import Workspace, env_for, header, loop_entry, loopctl, result, write_loops

GOAL_KIB = 1024
FD_SLACK = 4


def rss_kib(pid: int) -> int:
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("VmRSS:"):
            return int(row.split()[1])
    return 0


def open_fds(pid: int) -> int:
    """The process's open file descriptors (a leak grows them by one per run
    or request until EMFILE stops the daemon)."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def fd_growth(fds: list[tuple[int, int]], warm: int) -> int:
    after = [n for count, n in fds if count >= warm]
    return max(after) - after[0] if len(after) > 1 else 0


def started(argv: list[str], home: Path, log: Path) -> tuple[subprocess.Popen[str], str, int, str]:
    """The process, its host, port and token (from the URL it prints)."""
    proc = subprocess.Popen(argv, env=env_for(home), stdout=subprocess.PIPE,
                            stderr=log.open("w"), text=True)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    if "open " not in first:
        raise SystemExit(f"no URL from {argv}: {first!r} {log.read_text()[-500:]}")
    url = first.split("open ", 1)[1].strip()
    where, token = url.split("://", 1)[1].split("/?token=")
    host, port = where.rsplit(":", 1)
    return proc, host, int(port), token


def get(host: str, port: int, path: str, token: str | None) -> int:
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        answer = conn.getresponse()
        answer.read()
        return answer.status
    finally:
        conn.close()


def growth(samples: list[tuple[int, int]], warm: int) -> int:
    after = [kib for count, kib in samples if count >= warm]
    return after[-1] - after[0] if len(after) > 1 else 0


class Team:
    """A team store for the soak's homes: a server of its own, one database."""

    def __init__(self) -> None:
        import sys

        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from store.pg_cluster import pg_bin_dir, start_cluster

        bin_dir = pg_bin_dir()
        if bin_dir is None:
            raise SystemExit("PostgreSQL (initdb, pg_ctl) is not installed")
        self.cluster = start_cluster(bin_dir)
        self.database = self.cluster.new_database()
        self.dsn = self.cluster.dsn(self.database)

    def top(self) -> str:
        """loops.yaml's top line that makes a home one of the team's."""
        return f"store: {self.dsn}\n"

    def init(self, home: Path) -> None:
        subprocess.run(loopctl("store", "init"), env=env_for(home), check=True,
                       stdout=subprocess.DEVNULL)

    def sessions(self) -> int:
        """The server's sessions of the store's database (psql asks from another)."""
        return int(self.cluster.sql("SELECT count(*) FROM pg_stat_activity "
                                    f"WHERE datname = '{self.database}'"))

    def close(self) -> None:
        self.cluster.stop("immediate")


def requests(ws: Workspace, total: int, anonymous: int,
             team: Team | None = None) -> dict[str, Any]:
    home = ws.home("serve")
    write_loops(home, [loop_entry(f"l{n}", ["true"], after="1h") for n in range(20)],
                top=team.top() if team else "")
    if team:
        team.init(home)
    proc, host, port, token = started(loopctl("serve", "--bind", "127.0.0.1:0"), home,
                                      ws.root / "serve.log")
    samples: list[tuple[int, int]] = []
    every = max(1, total // anonymous)  # one request in `every` without the token
    try:
        for n in range(1, total + 1):
            get(host, port, "/" if n % every == 0 else "/api/loops",
                None if n % every == 0 else token)
            if n % 1000 == 0:
                samples.append((n, rss_kib(proc.pid)))
                said = f", {team.sessions()} store sessions" if team else ""
                print(f"   requests {n:>7}: RSS {samples[-1][1] / 1024:7.1f} MiB{said}",
                      flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    warm = max(2000, total // 5)
    return {"samples": samples, "grown_kib": growth(samples, warm), "warm": warm}


def runs(ws: Workspace, total: int, step: int, team: Team | None = None) -> dict[str, Any]:
    home = ws.home("daemon")
    # max_runs 0: at the default 50 the 20 loops stop at 1,000 runs and a
    # longer soak waited forever for its next mark.
    write_loops(home, [loop_entry(f"r{n}", ["true"], every="1s", max_runs=0)
                       for n in range(20)],
                top="max_concurrent: 0\n" + (team.top() if team else ""))
    if team:
        team.init(home)
    log = ws.root / "daemon.log"
    proc, host, port, token = started(loopctl("daemon", "--serve", "127.0.0.1:0"), home, log)
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            for path in ("/metrics", "/api/loops"):
                try:
                    get(host, port, path, token)
                except OSError:
                    pass

    client = threading.Thread(target=poll, daemon=True)
    client.start()
    samples: list[tuple[int, int]] = []
    fds: list[tuple[int, int]] = []
    try:
        mark = step
        while mark <= total:
            time.sleep(0.5)
            fired = log.read_text().count(" fired ")
            if fired >= mark:
                samples.append((mark, rss_kib(proc.pid)))
                fds.append((mark, open_fds(proc.pid)))
                said = f", {team.sessions()} store sessions" if team else ""
                print(f"   runs {mark:>7}: RSS {samples[-1][1] / 1024:7.1f} MiB, "
                      f"{fds[-1][1]} fds{said}", flush=True)
                mark += step
    finally:
        stop.set()
        proc.terminate()
        proc.wait(timeout=60)
    warm = max(2 * step, total // 5)
    return {"samples": samples, "grown_kib": growth(samples, warm), "warm": warm,
            "fds": fds, "grown_fds": fd_growth(fds, warm)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--requests", type=int)
    parser.add_argument("--runs", type=int)
    parser.add_argument("--only", choices=["requests", "runs"])
    parser.add_argument("--store", action="store_true",
                        help="homes with a team store (a local PostgreSQL server)")
    args = parser.parse_args()
    total_req = args.requests or (10_000 if args.quick else 100_000)
    total_runs = args.runs or (500 if args.quick else 10_000)
    step = 100 if total_runs < 5000 else 1000
    header(f"soak: {total_req} requests, {total_runs} runs" + (", team store" if args.store
                                                                else ""))
    team = Team() if args.store else None
    try:
        return soak(args, total_req, total_runs, step, team)
    finally:
        if team:
            team.close()


def soak(args: argparse.Namespace, total_req: int, total_runs: int, step: int,
         team: Team | None) -> int:
    met = True
    with Workspace("soak") as ws:
        if args.only != "runs":
            got = requests(ws, total_req, max(1, total_req // 5), team)
            goal = GOAL_KIB * total_req // 100_000
            ok = got["grown_kib"] <= max(goal, 256)
            met &= ok
            result("serve RSS growth", f"{got['grown_kib']} KiB after {got['warm']} requests",
                   f"<= {max(goal, 256)} KiB", ok)
        if args.only != "requests":
            got = runs(ws, total_runs, step, team)
            goal = GOAL_KIB * total_runs // 10_000
            ok = got["grown_kib"] <= max(goal, 256)
            met &= ok
            result("daemon --serve RSS growth", f"{got['grown_kib']} KiB after {got['warm']} runs",
                   f"<= {max(goal, 256)} KiB", ok)
            # A client's connection may be open at a sample: a few fds of
            # slack, never one per run.
            fds_ok = got["grown_fds"] <= FD_SLACK
            met &= fds_ok
            result("daemon --serve open fds", f"+{got['grown_fds']} after {got['warm']} runs "
                   f"({got['fds'][0][1] if got['fds'] else 0} at the first mark)",
                   f"<= +{FD_SLACK}", fds_ok)
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
