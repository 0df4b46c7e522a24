"""100 due loops under `loopctl daemon` with `max_concurrent: 4` (DESIGN §18).

Each loop's agent is a shell that notes its start and end (ns timestamps,
one line each in a shared file) around `sleep --work` seconds. Measured:
- the delay from a slot freeing (an agent's end) to the next agent's start:
  each start after the first four is matched with the earliest end before
  it that no earlier start took; median and p90;
- the daemon's CPU (itself, and the supervisors it forked and reaped), per
  run, and the wall time until all runs settled;
- the same 100 loops with `max_concurrent: 0` (no cap), in the same run: the
  baseline for the CPU, so the ratio is what queueing costs the daemon;
- the most agents ever running at once (must be <= the cap).

    .venv/bin/python bench/cap.py [--loops 100] [--cap 4] [--work 0.5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
from _common import (
    Workspace,
    daemon_cpu,
    header,
    loop_entry,
    result,
    run_records,
    start_daemon,
    stop,
    write_loops,
)

AGENT = ('echo "start $(date +%s.%N)" >> "$1"; sleep "$2"; '
         'echo "end $(date +%s.%N)" >> "$1"')


def events(path: Path) -> list[tuple[float, str]]:
    rows = [line.split() for line in path.read_text().splitlines()]
    return sorted((float(at), kind) for kind, at in rows)


def handoff_delays(rows: list[tuple[float, str]], cap: int) -> list[float]:
    """For every start beyond the first `cap`: its time since the slot it
    took was freed (the earliest end before it not yet taken: slots are
    refilled in the order they free)."""
    free: list[float] = []
    delays = []
    started = 0
    for at, kind in rows:
        if kind == "end":
            free.append(at)
        else:
            started += 1
            if started > cap and free:
                delays.append(at - free.pop(0))
    return delays


def peak(rows: list[tuple[float, str]]) -> int:
    level = top = 0
    for _, kind in rows:
        level += 1 if kind == "start" else -1
        top = max(top, level)
    return top


def run_once(ws: Workspace, loops: int, cap: int, work: float) -> dict[str, Any]:
    home = ws.home(f"cap{cap}")
    marks = home / "marks"
    entries = [loop_entry(f"l{i:03d}", ["sh", "-c", AGENT, "agent", str(marks), str(work)],
                          every="1h") for i in range(loops)]
    write_loops(home, entries, top=f"max_concurrent: {cap}\n")
    daemon = start_daemon(home, "--quiet", stderr=subprocess.PIPE)
    proc = psutil.Process(daemon.pid)
    t0 = time.monotonic()
    try:
        while len(run_records(home)) < loops:
            if daemon.poll() is not None or time.monotonic() - t0 > 600:
                raise RuntimeError(f"daemon exited or stalled: {daemon.returncode}")
            time.sleep(0.05)
        wall = time.monotonic() - t0
        own, children = daemon_cpu(proc)
    finally:
        stop(daemon)
    rows = events(marks)
    delays = handoff_delays(rows, cap) if cap else []
    return {"cap": cap, "wall_s": round(wall, 2), "daemon_cpu_s": round(own, 3),
            "supervisors_cpu_s": round(children, 3), "peak": peak(rows),
            "starts": sum(1 for _, k in rows if k == "start"), "delays": delays}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--loops", type=int, default=100)
    ap.add_argument("--cap", type=int, default=4)
    ap.add_argument("--work", type=float, default=0.5, help="seconds each agent sleeps")
    ap.add_argument("--quick", action="store_true", help="40 loops")
    args = ap.parse_args()
    loops = 40 if args.quick else args.loops
    header(f"cap: {loops} due loops under the daemon, max_concurrent {args.cap} vs 0, "
           f"agents sleep {args.work:g} s")
    with Workspace("cap") as ws:
        base = run_once(ws, loops, 0, args.work)
        capped = run_once(ws, loops, args.cap, args.work)
    delays = sorted(capped.pop("delays"))
    base.pop("delays")
    med = statistics.median(delays)
    p90 = delays[int(len(delays) * 0.9) - 1]
    print("   uncapped:", json.dumps(base))
    print("   capped:  ", json.dumps(capped))
    print(f"   slot freed -> next agent started: median {med * 1e3:.0f} ms, p90 "
          f"{p90 * 1e3:.0f} ms, max {delays[-1] * 1e3:.0f} ms ({len(delays)} hand-offs)")
    per_run = capped["daemon_cpu_s"] / loops
    ratio = capped["daemon_cpu_s"] / max(base["daemon_cpu_s"], 1e-9)
    print(f"   daemon CPU: {capped['daemon_cpu_s']:.2f} s capped vs {base['daemon_cpu_s']:.2f} s "
          f"uncapped ({ratio:.2f}x); {per_run * 1e3:.1f} ms per run")
    ok = med <= 1.0 and capped["peak"] <= args.cap and capped["starts"] == loops
    result("cap", f"median hand-off {med * 1e3:.0f} ms, daemon CPU {ratio:.2f}x uncapped",
           "median <= 1 s, never more than the cap at once", ok,
           median_s=med, p90_s=p90, max_s=delays[-1], cpu_ratio=ratio, capped=capped,
           uncapped=base, command=f"bench/cap.py --loops {loops} --cap {args.cap} "
                                  f"--work {args.work:g}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
