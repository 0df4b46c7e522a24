"""The team store at scale, side by side in one run (issue 54 "Performance"):

1. An idle `tick` (nothing due) over 1,000 loops: a home of files against
   three homes playing three machines on one team store (each its own
   LOOPCTL_MACHINE, the same loops.yaml with a `store:` line), ticks
   interleaved; then the three machines' ticks at once (the wall of the
   slowest). Goal: within 2x of the home of files. Beside the wall times,
   the CPU of each tick process and the server's CPU per store tick (its
   ended backends', from /proc): they move little with other sessions'
   load, which the wall times do.
2. What a run adds over a local server, all of it: the claim, one renewal,
   the state's read-modify-writes a run's store locks make (four: `run`'s
   claim, the supervisor's claim read, launch, settle; bench/README.md),
   and publishing its record (fresh connection, a 64 KiB tail). In process,
   so the figure is the store's, not psycopg's import (bench/store.py
   measures that apart). Goal: at most 10 ms of wall time.

The server is started as the tests start it (tests/store/pg_cluster.py).
Times are printed, never asserted.

3. The connections the server accepts for one `run --scheduled` and one
   idle `tick` (goal: one per process; a supervisor forked by a driver
   opens its own).

    python bench/store_scale.py [--loops 1000] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import env_for, header, loop_entry, loopctl, result, timed, write_loops

ROOT = Path(__file__).resolve().parents[1]
# tests/ first: its `store` package (the test server) shadows bench/store.py,
# whose measures are loaded by path (bench_store).
sys.path.insert(0, str(ROOT / "tests"))
sys.modules.pop("store", None)

MACHINES = ("m1", "m2", "m3")


def idle_entry(name: str, cwd: Path) -> str:
    """A loop that is not due (its first slot next New Year): a pass weighs
    it and fires nothing, so the ticks compare the drivers' bookkeeping."""
    return loop_entry(name, ["true"], cwd=str(cwd)).replace("    every: 1h\n",
                                                            "    cron: 0 0 1 1 *\n")


def homes(tmp: Path, dsn: str, loops: int) -> dict[str, tuple[Path, dict[str, str]]]:
    """The home of files and the three machines' homes, each ticked once (the
    first pass reconciles: state rows for every loop)."""
    entries = [idle_entry(f"l{i:04d}", tmp) for i in range(loops)]
    made: dict[str, tuple[Path, dict[str, str]]] = {}
    write_loops(tmp / "files", entries)
    made["files"] = (tmp / "files", env_for(tmp / "files"))
    for name in MACHINES:
        write_loops(tmp / name, entries, top=f"store: {dsn}\n")
        made[name] = (tmp / name, env_for(tmp / name, LOOPCTL_MACHINE=name))
    timed(loopctl("store", "init"), made["m1"][1])
    for _, env in made.values():
        timed(loopctl("tick"), env)
    return made


def tick_once(env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one `tick` process: the CPU
    figure moves little with other sessions' load, the wall one does."""
    start = time.perf_counter()
    proc = subprocess.Popen(loopctl("tick"), env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"tick exited {os.waitstatus_to_exitcode(status)}")
    return wall, usage.ru_utime + usage.ru_stime


def server_cpu(cluster: object) -> float:
    """CPU seconds of the server's ended backends (the postmaster's reaped
    children: one per connection), from /proc; 0.0 where there is none."""
    try:
        data = cluster.data  # type: ignore[attr-defined]
        pid = int((data / "postmaster.pid").read_text().split()[0])
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def idle_ticks(made: dict[str, tuple[Path, dict[str, str]]], reps: int,
               cluster: object) -> tuple[dict[str, float], float, dict[str, float]]:
    """Median wall per home, the three machines' at once, and CPU: each
    home's median tick process, and `server`, the server's per store tick."""
    walls: dict[str, list[float]] = {name: [] for name in made}
    cpus: dict[str, list[float]] = {name: [] for name in made}
    together = []
    server_before = server_cpu(cluster)
    for _ in range(reps):
        for name, (_, env) in made.items():
            wall, cpu = tick_once(env)
            walls[name].append(wall)
            cpus[name].append(cpu)
        start = time.perf_counter()
        procs = [subprocess.Popen(loopctl("tick"), env=made[m][1], stdout=subprocess.DEVNULL)
                 for m in MACHINES]
        assert all(p.wait() == 0 for p in procs)
        together.append(time.perf_counter() - start)
    time.sleep(0.5)  # the last backends' exits reaped
    cpu = {name: statistics.median(c) for name, c in cpus.items()}
    cpu["server"] = (server_cpu(cluster) - server_before) / (2 * len(MACHINES) * reps)
    return ({name: statistics.median(w) for name, w in walls.items()},
            statistics.median(together), cpu)


def connections(cluster: object, tmp: Path) -> dict[str, int]:
    """Connections the server accepts for one `run NAME --scheduled` and for
    one idle `tick` (through tests/store/proxy.py, which counts them)."""
    from urllib.parse import urlsplit

    from store.proxy import Proxy

    dsn = cluster.dsn(cluster.new_database())  # type: ignore[attr-defined]
    relay = Proxy(urlsplit(dsn).port or 5432)
    relay.start()
    try:
        parts = urlsplit(dsn)
        relayed = parts._replace(netloc=f"{parts.username}@127.0.0.1:{relay.port}").geturl()
        home = tmp / "connections"
        write_loops(home, [loop_entry("one", ["true"], cwd=str(tmp))], top=f"store: {relayed}\n")
        env = env_for(home, LOOPCTL_MACHINE="m1")
        timed(loopctl("store", "init"), env)
        counts = {}
        for what, args in (("run --scheduled", ("run", "one", "--scheduled")),
                           ("idle tick", ("tick", "--quiet"))):
            before = relay.accepted
            timed(loopctl(*args), env)
            counts[what] = relay.accepted - before
        return counts
    finally:
        relay.close()


def per_run_ms(cluster: object) -> dict[str, float]:
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_store", ROOT / "bench" / "store.py")
    assert spec is not None and spec.loader is not None
    bench_store = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_store)
    in_process, state_cycle = bench_store.in_process, bench_store.state_cycle
    publishing = bench_store.publishing
    new = cluster.new_database  # type: ignore[attr-defined]
    dsn = cluster.dsn  # type: ignore[attr-defined]
    claim_ms, renew_ms = in_process(dsn(new()), 200)
    state_ms = state_cycle(dsn(new()), 100)
    with tempfile.TemporaryDirectory(prefix="loopctl-bench-publish-") as tmp:
        publish_ms, _ = publishing(dsn(new()), Path(tmp), 30)
    return {"claim": claim_ms, "renew": renew_ms, "state x4": 4 * state_ms,
            "publish": publish_ms}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--loops", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    header(f"team store at scale: 3 machines x {args.loops} loops; what a run adds")
    from store.pg_cluster import pg_bin_dir, start_cluster

    bin_dir = pg_bin_dir()
    if bin_dir is None:
        sys.exit("PostgreSQL (initdb, pg_ctl) is not installed")
    cluster = start_cluster(bin_dir)
    try:
        with tempfile.TemporaryDirectory(prefix="loopctl-bench-store-scale-") as tmp:
            made = homes(Path(tmp), cluster.dsn(cluster.new_database()), args.loops)
            medians, together, cpu = idle_ticks(made, args.reps, cluster)
            counted = connections(cluster, Path(tmp))
        parts = per_run_ms(cluster)
    finally:
        cluster.stop("immediate")
    files = medians.pop("files")
    worst = max(medians.values())
    print(f"   idle tick, {args.loops} loops (median of {args.reps}): files "
          f"{files * 1000:.0f} ms; store " +
          ", ".join(f"{m} {w * 1000:.0f} ms" for m, w in medians.items()) +
          f"; the three at once {together * 1000:.0f} ms")
    store_cpu = max(cpu[m] for m in MACHINES)
    print(f"   CPU per idle tick (median): files {cpu['files'] * 1000:.1f} ms; store " +
          ", ".join(f"{m} {cpu[m] * 1000:.1f} ms" for m in MACHINES) +
          f"; the server's per store tick {cpu['server'] * 1000:.1f} ms (mean); "
          f"ratio {(store_cpu + cpu['server']) / cpu['files']:.2f}x with the server's")
    print("   connections: " + ", ".join(f"{k} {v}" for k, v in counted.items()))
    total = sum(parts.values())
    print("   a run over a local server: " +
          ", ".join(f"{k} {v:.2f} ms" for k, v in parts.items()) + f"; total {total:.2f} ms")
    result("store_tick_scale", f"{worst / files:.2f}x (slowest machine's idle tick vs files)",
           "<= 2x", worst / files <= 2, files_ms=round(files * 1000),
           **{f"{m}_ms": round(w * 1000) for m, w in medians.items()},
           together_ms=round(together * 1000), files_cpu_ms=round(cpu["files"] * 1000, 1),
           store_cpu_ms=round(store_cpu * 1000, 1), server_cpu_ms=round(cpu["server"] * 1000, 1))
    result("store_run_overhead", f"{total:.2f} ms (claim, renew, 4 state writes, publish)",
           "<= 10 ms", total <= 10, **{k.replace(" ", "_"): round(v, 2)
                                        for k, v in parts.items()})


if __name__ == "__main__":
    main()
