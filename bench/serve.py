"""`loopctl serve` (DESIGN §19): the overview of 1,000 loops (each with a
strip of its last 20 runs), the fleet timeline of their last 24 hours (24
runs each), and a loop's page with 500 runs, each measured side by side with `loopctl ls` (and the
matching `--json` command) on the same home; and fire lateness under a
`daemon --serve` while clients keep asking for pages.

Goals: the overview and the loop page answer in under 300 ms, the timeline
in under 500 ms (median wall
of a request from a client on the same machine); the median lateness under that
load is within 100 ms of the same daemon's without it (measured in the
same run: on a loaded machine lateness.py's own 100 ms is the machine's),
and no fire is over 1 s late.

The 500 runs are one real record of the loop, made by `loopctl run`, cloned
with distinct run ids, start times, durations, outcomes, costs and check
metrics, and listed in the loop's run index, as loopctl would have left
them with `--keep-runs 1000`.

`--screenshot PATH` instead takes the README's picture of the overview: a
small home with a few loops, served, loaded in headless chromium through
the token URL (tests/serve/cdp.py), saved as a PNG.
"""

from __future__ import annotations

import argparse
import http.client
import json
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from _common import (
    Workspace,
    check,
    env_for,
    header,
    loop_entry,
    loopctl,
    result,
    run_records,
    timed,
    write_loops,
)

GOAL_S = 0.3
TIMELINE_GOAL_S = 0.5
DAY_RUNS = 24
OUTCOMES = ["ok"] * 7 + ["failed", "timeout", "skipped"]


class Server:
    def __init__(self, home: Path, *args: str) -> None:
        bind = ("--serve", "127.0.0.1:0") if args == ("daemon",) else ("--bind", "127.0.0.1:0")
        self.proc = subprocess.Popen(loopctl(*args, *bind, "--quiet"),
                                     env=env_for(home), stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        url = self.proc.stdout.readline().split("open ", 1)[1].strip()
        self.url = url
        self.port = int(url.split(":")[2].split("/")[0])
        self.token = url.split("token=", 1)[1]

    def get(self, path: str) -> float:
        started = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        conn.request("GET", path, headers={"Authorization": f"Bearer {self.token}"})
        answer = conn.getresponse()
        body = answer.read()
        conn.close()
        if answer.status != 200:
            raise RuntimeError(f"GET {path}: {answer.status} {body[:300]!r}")
        return time.perf_counter() - started

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


def interleaved(reps: int, subjects: dict[str, object]) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in subjects}
    for _ in range(reps):
        for name, run in subjects.items():
            times[name].append(run())  # type: ignore[operator]
    return times


def report(times: dict[str, list[float]]) -> None:
    for name, xs in times.items():
        print(f"   {name:<40} median {statistics.median(xs) * 1e3:7.1f} ms "
              f"(min {min(xs) * 1e3:.1f}, max {max(xs) * 1e3:.1f})")


def overview_home(ws: Workspace, total: int) -> Path:
    home = ws.home("overview")
    entries = [loop_entry(f"loop-{i:04d}", ["true"], every="1h", after="1h")
               for i in range(total - 3)]
    entries += [loop_entry(f"failing-{i}", ["sh", "-c", "echo 3 tests failed; exit 1"],
                           every="1h", after="1h") for i in range(3)]
    write_loops(home, entries)
    check(loopctl("tick"), env_for(home))
    for i in range(3):
        subprocess.run(loopctl("run", f"failing-{i}"), env=env_for(home),
                       capture_output=True, check=False)
    write_digests(home, [f"loop-{i:04d}" for i in range(total - 3)], DAY_RUNS)
    return home


def write_digests(home: Path, names: list[str], runs: int) -> None:
    """Each loop's digest as loopctl leaves it after `runs` hourly runs over
    the last day (storage/run_digest.py): what the strips and the timeline
    read, one small file per loop."""
    folder = home / "state" / "run-digest"
    folder.mkdir(parents=True, exist_ok=True)
    now = time.time()
    for at, name in enumerate(names):
        entries = []
        for n in range(1, runs + 1):
            started = now - (runs - n) * 3600 - at % 3000
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started))
            outcome = OUTCOMES[(n + at) % len(OUTCOMES)]
            entries.append({"id": f"{stamp}-{n:04d}", "o": outcome, "c": n % 11 == 0,
                            "r": "3 tests failed in test_api.py" if outcome != "ok" else None,
                            "q": started - 40 if n % 5 == 0 else None, "s": started,
                            "e": started + 30 + n % 90, "usd": 0.01 * (n % 13)})
        day = time.strftime("%Y-%m-%d", time.gmtime(now))
        (folder / f"{name}.json").write_text(json.dumps(
            {"runs": entries, "days": {day: 0.5}}))


def runs_home(ws: Workspace, runs: int) -> Path:
    home = ws.home("runs")
    write_loops(home, [loop_entry("busy", ["sh", "-c", "echo metric: 7"], every="1h",
                                  after="1h", keep_runs=1000, max_runs=0,
                                  check=["sh", "-c", "echo metric: 7"],
                                  check_metric="metric: (\\d+)")])
    check(loopctl("run", "busy"), env_for(home))
    folder = home / "state" / "runs" / "busy"
    [first] = [p for p in folder.glob("*.json")]
    record = json.loads(first.read_text())
    base = time.time() - runs * 3600
    ids = []
    for n in range(1, runs + 1):
        started = base + n * 3600
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started))
        run_id = f"{stamp}-{n:04d}"
        ids.append(run_id)
        clone = dict(record, run_id=run_id, iteration=n, outcome=OUTCOMES[n % len(OUTCOMES)],
                     started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
                     ended_at=time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                            time.gmtime(started + 30 + n % 90)),
                     duration_s=30.0 + n % 90, cost_usd=0.01 * (n % 13),
                     log=str(folder / f"{run_id}.log"),
                     check=dict(record.get("check") or {}, metric=float(n % 17)))
        (folder / f"{run_id}.json").write_text(json.dumps(clone))
        (folder / f"{run_id}.log").write_text("bench\n")
    first.unlink()
    first.with_suffix(".log").unlink()
    index = home / "state" / "run-index" / "busy.json"
    index.write_text(json.dumps({"version": 1, "runs": ids}))
    return home


def measure_pages(ws: Workspace, reps: int) -> tuple[bool, dict[str, float]]:
    figures: dict[str, float] = {}
    home = overview_home(ws, 1000)
    server = Server(home, "serve")
    try:
        server.get("/")  # warm: the first request parses nothing the CLI would not
        server.get("/timeline")
        times = interleaved(reps, {
            "GET / (overview, 1,000 loops)": lambda: server.get("/"),
            "GET /timeline (1,000 loops, 24 h)": lambda: server.get("/timeline"),
            "GET /api/loops": lambda: server.get("/api/loops"),
            "loopctl ls": lambda: timed(loopctl("ls"), env_for(home)),
            "loopctl ls --json": lambda: timed(loopctl("ls", "--json"), env_for(home)),
        })
    finally:
        server.stop()
    report(times)
    figures["overview_ms"] = statistics.median(times["GET / (overview, 1,000 loops)"]) * 1e3
    figures["ls_ms"] = statistics.median(times["loopctl ls"]) * 1e3
    figures["timeline_ms"] = statistics.median(times["GET /timeline (1,000 loops, 24 h)"]) * 1e3
    home = runs_home(ws, 500)
    server = Server(home, "serve")
    try:
        server.get("/loops/busy")
        times = interleaved(reps, {
            "GET /loops/busy (500 runs, 4 charts)": lambda: server.get("/loops/busy"),
            "GET /api/loops/busy/runs?limit=0": lambda: server.get(
                "/api/loops/busy/runs?limit=0"),
            "loopctl history busy --limit 0 --json": lambda: timed(
                loopctl("history", "busy", "--limit", "0", "--json"), env_for(home)),
            "loopctl ls (same home)": lambda: timed(loopctl("ls"), env_for(home)),
        })
    finally:
        server.stop()
    report(times)
    figures["loop_page_ms"] = statistics.median(
        times["GET /loops/busy (500 runs, 4 charts)"]) * 1e3
    figures["history_json_ms"] = statistics.median(
        times["loopctl history busy --limit 0 --json"]) * 1e3
    met = figures["overview_ms"] < GOAL_S * 1e3 and figures["loop_page_ms"] < GOAL_S * 1e3 \
        and figures["timeline_ms"] < TIMELINE_GOAL_S * 1e3
    return met, figures


def lateness(ws: Workspace, fires: int, loaded: bool, apart: bool = False) -> list[float]:
    """Lateness of each fire of a `daemon --serve`, with three clients asking
    for pages back to back all along (`loaded`) or with none; `apart`: a
    plain daemon, and `serve` as a process of its own beside it."""
    from lateness import LOOP, parse_log

    home = ws.home("lateness")
    state_file = home / "state" / "state.json"
    agent = ["sh", "-c", f"date +%s.%N; sleep 0.3; cat '{state_file}'; echo"]
    idle = [loop_entry(f"idle-{i:03d}", ["true"], every="1h", after="1h") for i in range(200)]
    write_loops(home, [loop_entry(LOOP, agent, every="2s", after="3s", max_runs=fires,
                                  cwd=str(ws.root)), *idle])
    server = Server(home, "serve" if apart else "daemon")
    driver = subprocess.Popen(loopctl("daemon", "--quiet"), env=env_for(home)) if apart else None
    stop = threading.Event()
    served = [0]

    def hammer(path: str) -> None:
        while not stop.is_set():
            server.get(path)
            served[0] += 1

    clients = [threading.Thread(target=hammer, args=(p,), daemon=True)
               for p in (("/", "/metrics", "/loops/late") if loaded else ())]
    for client in clients:
        client.start()
    deadline = time.monotonic() + 15 + fires * 4
    try:
        while len(run_records(home)) < fires and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)
    finally:
        stop.set()
        for client in clients:
            client.join(timeout=30)
        server.stop()
        if driver is not None:
            driver.send_signal(signal.SIGTERM)
            driver.wait(timeout=30)
    late = []
    for path in run_records(home):
        record = json.loads(path.read_text())
        if record.get("loop") != LOOP:
            continue
        parsed = parse_log(path.with_suffix(".log").read_text(), record["run_id"])
        if parsed:
            late.append(parsed[0] - parsed[1])
    said = ("loaded, serve apart" if apart else "loaded") if loaded else "no clients"
    print(f"   {said}: {served[0]} page requests during "
          f"{len(late)} fires; lateness (ms): " + " ".join(f"{x * 1e3:.0f}" for x in late))
    return late


def lateness_under_load(ws: Workspace, fires: int) -> tuple[bool, dict[str, float]]:
    """The same daemon with and without clients, one after the other: the
    machine's own lateness is the baseline the load is judged against."""
    quiet, loaded = lateness(ws, fires, False), lateness(ws, fires, True)
    apart = lateness(ws, fires, True, apart=True)
    if not quiet or not loaded or not apart:
        return False, {}
    med, worst = statistics.median(loaded), max(loaded)
    base = statistics.median(quiet)
    return (med - base <= 0.1 and worst <= 1.0 and len(loaded) >= fires), {
        "lateness_median_ms": med * 1e3, "lateness_max_ms": worst * 1e3,
        "lateness_quiet_median_ms": base * 1e3,
        "lateness_apart_median_ms": statistics.median(apart) * 1e3}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="7 repetitions, 6 fires")
    ap.add_argument("--screenshot", type=Path, help="only take the README's screenshot")
    args = ap.parse_args()
    if args.screenshot:
        from serve_screenshot import screenshot

        screenshot(args.screenshot.resolve())
        return 0
    reps, fires = (7, 6) if args.quick else (15, 12)
    header(f"serve: overview of 1,000 loops, a loop page of 500 runs ({reps} interleaved "
           f"repetitions); lateness under load ({fires} fires)")
    with Workspace("serve") as ws:
        pages_met, figures = measure_pages(ws, reps)
        late_met, late = lateness_under_load(ws, fires)
    result("serve", f"overview {figures['overview_ms']:.0f} ms (ls {figures['ls_ms']:.0f} ms), "
           f"timeline {figures['timeline_ms']:.0f} ms, "
           f"loop page {figures['loop_page_ms']:.0f} ms, lateness under load median "
           f"{late.get('lateness_median_ms', float('nan')):.0f} ms (no load "
           f"{late.get('lateness_quiet_median_ms', float('nan')):.0f} ms) max "
           f"{late.get('lateness_max_ms', float('nan')):.0f} ms",
           "pages < 300 ms, timeline < 500 ms; lateness under load <= +100 ms of none, max <= 1 s",
           pages_met and late_met,
           **figures, **late)
    return 0 if pages_met and late_met else 1


if __name__ == "__main__":
    sys.exit(main())
