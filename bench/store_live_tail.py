"""What a run's live log costs on the wire (issue 54, DESIGN §21): the bytes
a supervisor sends per renewal of its claim, through a counting proxy
(tests/store/proxy.py), as engine/team_fence.Fence sends them:

1. plain renewals (the log did not change: nothing more is sent);
2. renewals after the log gained one 80-byte line each (the append);
3. a renewal replacing the whole 64 KiB tail (the first, or after a lost answer);
4. a follower's look (`logs -f` on another machine) when nothing is new.

Extra bytes per renewal = (2) - (1). The server is started as the tests
start it (tests/store/pg_cluster.py). Printed, never asserted.

    python bench/store_live_tail.py [--renewals N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from _common import header, result

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def per_call(proxy: Any, count: int, call: Any) -> float:
    before = proxy.sent
    for _ in range(count):
        call()
    return (proxy.sent - before) / count


def measure(dsn: str, count: int) -> None:
    import psycopg
    from store.proxy import Proxy

    from loopctl.storage.pg import schema
    from loopctl.storage.pg.claims import renew
    from loopctl.storage.pg.live_tail import look, next_update, renew_with_tail

    with psycopg.connect(dsn, autocommit=True) as conn:
        schema.migrate(conn, "bench", "bench")
        conn.execute("INSERT INTO loopctl.slot_claims (loop, slot, run_id, machine, digest) "
                     "VALUES ('b', 'run:r', 'r', 'm1', 'd')")
    proxy = Proxy(urlsplit(dsn).port or 5432)
    proxy.start()
    parts = urlsplit(dsn)
    via = parts._replace(netloc=f"{parts.username}@127.0.0.1:{proxy.port}").geturl()
    log = Path(tempfile.mkdtemp()) / "r.log"
    log.write_bytes(b"x" * 70_000)
    sent: list[int | None] = [None]

    def renewal() -> None:  # Fence._renewal's steps
        update = next_update(str(log), sent[0])
        if update is None:
            renew(conn, "b", "r", 60.0)
            return
        _, landed = renew_with_tail(conn, "b", "r", 60.0, update)
        sent[0] = update.size if landed else None

    def grow() -> None:
        with open(log, "ab") as out:
            out.write(b"y" * 79 + b"\n")
        renewal()

    with psycopg.connect(via, autocommit=True) as conn:
        whole = per_call(proxy, 1, renewal)
        plain = per_call(proxy, count, renewal)
        appended = per_call(proxy, count, grow)
        looked = per_call(proxy, count, lambda: look(conn, "b", "m1", "r", sent[0] or 0, 60.0))
    proxy.close()
    result("plain renewal (log unchanged), bytes sent", f"{plain:.0f}", "no tail sent",
           True)
    extra = appended - plain
    result("extra bytes per renewal for an 80-byte line", f"{extra:.0f}",
           "the line and < 200 bytes of framing", extra < 80 + 200)
    result("first renewal, whole 64 KiB tail, bytes sent", f"{whole:.0f}",
           "< 64 KiB + 1 KiB", whole < 65536 + 1024)
    result("follower's look with nothing new, bytes sent", f"{looked:.0f}", "< 1 KiB",
           looked < 1024)

def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--renewals", type=int, default=50)
    args = parser.parse_args()
    from store.pg_cluster import pg_bin_dir, start_cluster

    bin_dir = pg_bin_dir()
    if bin_dir is None:
        sys.exit("PostgreSQL (initdb, pg_ctl) is not installed")
    cluster = start_cluster(bin_dir)
    try:
        header("live log tail on the team store's renewals")
        measure(cluster.dsn(cluster.new_database()), args.renewals)
    finally:
        cluster.stop("immediate")


if __name__ == "__main__":
    main()
