"""What the team store costs a run (issue 54, DESIGN §21).

1. `loopctl run NAME --scheduled --slot S` (the loop's command `true`) in a
   home with a team store on a local PostgreSQL server, vs the same in a
   home of files, interleaved, each repetition a fresh slot. The store's
   share: the gate (connect, schema check) and the claim (connect, the
   definition check, the insert); a run shorter than a renewal period never
   renews. Goal (the issue): at most 10 ms of wall time a run.
2. In one process, over one connection: a claim and a renewal, per call.
3. Publishing a run's record (issue 54 item 2), as a supervisor does it
   after the run settles: one marked record with a 64 KiB log sent over a
   fresh connection (connect, schema check, upsert), per run; and the
   upsert alone. This is the wall time a run in a store home adds to what
   1. measures for the claim.

The server is started as the tests start it (tests/store/pg_cluster.py):
initdb on a free port, fsync off. Times are printed, never asserted.

    python bench/store.py [--reps N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import env_for, header, loopctl, result, timed

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

HOURLY = """version: 1
{top}loops:
  b:
    command: ["true"]
    prompt: bench
    cron: 0 * * * *
    cwd: {cwd}
    timeout: 1h
    max_runs: 100000
    for: 30d
    created_at: '{created}'
"""


def hours_back(n: int) -> str:
    return time.strftime("%Y-%m-%dT%H:00:00Z", time.gmtime(time.time() - n * 3600))


def make_home(folder: Path, top: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "loops.yaml").write_text(HOURLY.format(top=top, cwd=folder,
                                                     created=hours_back(24 * 20)))
    return folder


def per_run(dsn: str, tmp: Path, reps: int) -> tuple[float, float]:
    files = make_home(tmp / "files", "")
    team = make_home(tmp / "team", f"store: {dsn}\n")
    env_files, env_team = env_for(files), env_for(team, LOOPCTL_MACHINE="bench")
    timed(loopctl("store", "init"), env_team)
    walls: dict[str, list[float]] = {"files": [], "team": []}
    for i in range(reps):
        slot = hours_back(reps - i)
        for name, env in (("files", env_files), ("team", env_team)):
            walls[name].append(timed(loopctl("run", "b", "--scheduled", "--slot", slot),
                                     env))
    return statistics.median(walls["files"]), statistics.median(walls["team"])


def in_process(dsn: str, n: int) -> tuple[float, float]:
    from loopctl.storage.pg.claims import claim, renew
    from loopctl.storage.pg.connect import connect
    from loopctl.storage.pg.schema import migrate

    conn = connect(dsn)
    migrate(conn, "bench", dsn)
    start = time.perf_counter()
    for i in range(n):
        claim(conn, "b", f"schedule:{i}", f"run-{i}", "bench", "d" * 32)
    claimed = time.perf_counter()
    for i in range(n):
        renew(conn, "b", f"run-{i}")
    renewed = time.perf_counter()
    conn.close()
    return (claimed - start) / n * 1000, (renewed - claimed) / n * 1000


def publishing(dsn: str, tmp: Path, n: int) -> tuple[float, float]:
    """(ms per publish_pending of one record, fresh connection; ms per upsert)."""
    import os

    from loopctl.engine.team_publish import publish_pending
    from loopctl.storage.pg.connect import connect
    from loopctl.storage.pg.runs import publish_run
    from loopctl.storage.pg.schema import migrate
    from loopctl.storage.store import Store
    from loopctl.storage.team_outbox import note_record

    home = make_home(tmp / "publish", f"store: {dsn}\n")
    os.environ.update(LOOPCTL_HOME=str(home), LOOPCTL_MACHINE="bench")
    conn = connect(dsn)
    migrate(conn, "bench", dsn)
    store = Store()
    folder = store.paths.loop_runs_dir("b")
    folder.mkdir(parents=True)
    walls = []
    for i in range(n):
        run_id = f"20261201T000000Z-{i + 1:04d}"
        store.paths.run_log("b", run_id).write_bytes(b"x" * 100 + b"\n" * 70_000)
        store.write_json(store.paths.run_record("b", run_id),
                         {"run_id": run_id, "outcome": "ok", "machine": "bench"})
        note_record(store.paths, "b", run_id)
        start = time.perf_counter()
        assert publish_pending(store) == 1
        walls.append(time.perf_counter() - start)
    start = time.perf_counter()
    for i in range(n):
        publish_run(conn, "b", "bench", f"upsert-{i}", '{"outcome": "ok"}', "/x.log",
                    b"x" * 65536, True)
    upsert = (time.perf_counter() - start) / n
    conn.close()
    return statistics.median(walls) * 1000, upsert * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    header("team store: what a run pays")
    from store.pg_cluster import pg_bin_dir, start_cluster

    bin_dir = pg_bin_dir()
    if bin_dir is None:
        sys.exit("PostgreSQL (initdb, pg_ctl) is not installed")
    cluster = start_cluster(bin_dir)
    try:
        dsn = cluster.dsn(cluster.new_database())
        with tempfile.TemporaryDirectory(prefix="loopctl-bench-store-") as tmp:
            files, team = per_run(dsn, Path(tmp), args.reps)
        claim_ms, renew_ms = in_process(cluster.dsn(cluster.new_database()), 500)
        with tempfile.TemporaryDirectory(prefix="loopctl-bench-publish-") as tmp:
            publish_ms, upsert_ms = publishing(cluster.dsn(cluster.new_database()), Path(tmp),
                                               50)
    finally:
        cluster.stop("immediate")
    extra = (team - files) * 1000
    print(f"   run --scheduled: files {files * 1000:.1f} ms, team store {team * 1000:.1f} ms "
          f"(median of {args.reps}, +{extra:.1f} ms: mostly importing psycopg in a fresh "
          f"process); in process: claim {claim_ms:.2f} ms, renew {renew_ms:.2f} ms")
    print(f"   publishing a record after a run: {publish_ms:.2f} ms (fresh connection, median "
          f"of 50), the upsert alone {upsert_ms:.2f} ms; a home of files: none")
    both = claim_ms + renew_ms
    result("store_claim_renew", f"{both:.2f} ms (claim + renew, in process)", "<= 10 ms",
           both <= 10, files_ms=round(files * 1000, 1), team_ms=round(team * 1000, 1),
           process_extra_ms=round(extra, 1), claim_ms=round(claim_ms, 2),
           renew_ms=round(renew_ms, 2), publish_ms=round(publish_ms, 2),
           upsert_ms=round(upsert_ms, 2))


if __name__ == "__main__":
    main()
