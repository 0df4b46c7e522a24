"""Run every loopctl benchmark and print a summary table.

    python bench/run_all.py            # full: 1 GiB flood, 60 s daemon idle, 30 fires
    python bench/run_all.py --quick    # shorter: no 1 GiB, 20 s idle, 10 fires, fewer reps
    python bench/run_all.py --only tick_idle,scale --json results.json

Each benchmark runs as its own process (`python bench/NAME.py`), one after
the other (never in parallel: they would skew each other's timings); its
output streams through, and its `BENCH-RESULT` lines make the table. Exit
status: 0 when every goal is met, 1 otherwise, 2 if a benchmark crashed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = ["tick_idle", "flood", "scale", "concurrent_ticks", "daemon_idle", "lateness",
           "run_cpu", "trigger_latency", "protect", "slots"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="pass --quick to every benchmark")
    ap.add_argument("--only", default="", help="comma-separated benchmark names")
    ap.add_argument("--json", metavar="FILE", help="also write every result row to FILE")
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n] or BENCHES
    unknown = set(names) - set(BENCHES)
    if unknown:
        ap.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    rows: list[dict] = []
    crashed: list[str] = []
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    for name in names:
        cmd = [sys.executable, str(HERE / f"{name}.py")] + (["--quick"] if args.quick else [])
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        got = 0
        for line in proc.stdout:
            if line.startswith("BENCH-RESULT "):
                row = json.loads(line[len("BENCH-RESULT "):])
                row["elapsed_s"] = time.monotonic() - t0
                rows.append(row)
                got += 1
            else:
                sys.stdout.write(line)
                sys.stdout.flush()
        # Exit 1 is a benchmark that ran and missed a goal (its rows say
        # which); anything else without rows is a crash.
        if proc.wait() not in (0, 1) or not got:
            crashed.append(name)
            print(f"!! {name} failed (exit {proc.returncode})", flush=True)
        print(flush=True)
    print(f"loopctl benchmarks, {'quick' if args.quick else 'full'} run started {started}")
    w_name = max([len(r["name"]) for r in rows] + [9])
    w_fig = max([len(r["figure"]) for r in rows] + [6])
    w_goal = max([len(r["goal"]) for r in rows] + [4])
    print(f"{'benchmark':<{w_name}}  {'figure':<{w_fig}}  {'goal':<{w_goal}}  result")
    print(f"{'-' * w_name}  {'-' * w_fig}  {'-' * w_goal}  ------")
    for r in rows:
        verdict = "met" if r["met"] else "MISSED"
        print(f"{r['name']:<{w_name}}  {r['figure']:<{w_fig}}  {r['goal']:<{w_goal}}  {verdict}")
    for name in crashed:
        print(f"{name:<{w_name}}  {'(crashed)':<{w_fig}}  {'':<{w_goal}}  ERROR")
    if args.json:
        Path(args.json).write_text(json.dumps({"started": started, "quick": args.quick,
                                               "results": rows, "crashed": crashed},
                                              indent=2) + "\n")
    if crashed:
        return 2
    return 0 if all(r["met"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
