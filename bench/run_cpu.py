"""loopctl's own CPU per run (spawn, record, settle) with agent `true`, vs
`python3 -c "import subprocess; subprocess.run(['true'])"`.

Goals (issue 40): `run NAME` <= 2.5x CPU time, `tick --wait` <= 2.8x, a
run fired by a warm `loopctl daemon` <= 1x (issue 15 asked 3x, 3x and 2x).

CPU = user + system of the process and every descendant it waited for, from
os.wait4 on the command (the tick waits for its supervisor, the supervisor
for the agent, so the whole run is in it). Two subjects, each on a fresh
copy of a reconciled home whose one loop (`command: [true]`) is due:

- `loopctl tick --wait`: the scheduled path (driver pass, detached
  supervisor, record, settle), what cron pays per run;
- `loopctl run NAME`: the foreground path (one process supervises).
- `loopctl daemon` (issue 15): a daemon fires an `every: 1s` loop over and
  over; its runs are supervised by warm supervisors (engine/warm.py), forked
  from the daemon once. CPU per run = the growth of the CPU of the daemon,
  its live warm supervisors and every child any of them reaped (psutil
  `cpu_times`: retired supervisors, agents) over a window of runs, read
  when no run is in flight, divided by the runs recorded in the window.
  Idle wake-ups and heartbeats are included.

Subjects and baseline alternate; medians compared.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
from _common import (
    PY,
    Workspace,
    copy_home,
    daemon_cpu,
    env_for,
    header,
    loop_entry,
    loopctl,
    median,
    past_wake,
    reconciled,
    result,
    run_in_flight,
    run_records,
    start_daemon,
    stop,
    write_loops,
)

BASELINE = [PY, "-c", "import subprocess; subprocess.run(['true'])"]


def cpu_of(cmd: list[str], env: dict[str, str] | None = None) -> float:
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read() if proc.stderr else b""
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd!r} exited {proc.returncode}: {err.decode()[:300]}")
    return usage.ru_utime + usage.ru_stime


def template(ws: Workspace) -> Path:
    home = ws.home("template")
    # Due past a minute tick's 15 s early fire (domain/schedule.tick_early):
    # the reconciling tick fires nothing.
    reconciled(home, [loop_entry("cpu", ["true"], every="1h", after="20s", max_runs=0)])
    past_wake(home)
    return home


def subject(ws: Workspace, tpl: Path, args: list[str]) -> float:
    home = copy_home(tpl, ws.home("rep"))
    try:
        used = cpu_of(loopctl(*args), env_for(home))
        records = run_records(home)
        assert len(records) == 1, records
        assert json.loads(records[0].read_text())["outcome"] == "ok"
        return used
    finally:
        shutil.rmtree(home, ignore_errors=True)


def idle_tree(home: Path, daemon: Any) -> float | None:
    """CPU of the daemon, its warm supervisors and everything any of them
    reaped, when no run is in flight; None while one is."""
    if run_in_flight(home, daemon):
        return None
    try:
        return sum(daemon_cpu(daemon))
    except psutil.Error:
        return None


def daemon_per_run(ws: Workspace, runs: int) -> float:
    """CPU per run of a daemon firing one `every: 1s` loop `runs` times."""
    import psutil

    home = ws.home("daemon")
    write_loops(home, [loop_entry("warm", ["true"], every="1s", max_runs=0)])
    proc = start_daemon(home, "--quiet")
    daemon = psutil.Process(proc.pid)

    def settled_after(count: int) -> tuple[int, float]:
        deadline = time.monotonic() + 60 + 3 * runs
        while time.monotonic() < deadline:
            done = len(run_records(home))
            used = idle_tree(home, daemon) if done >= count else None
            if used is not None and len(run_records(home)) == done:
                return done, used
            time.sleep(0.01)
        raise RuntimeError(f"daemon did not reach {count} runs in {home}")

    try:
        first, cpu0 = settled_after(2)  # past start-up and the first passes
        last, cpu1 = settled_after(first + runs)
    finally:
        stop(proc)
        shutil.rmtree(home, ignore_errors=True)
    return (cpu1 - cpu0) / (last - first)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="7 repetitions")
    args = ap.parse_args()
    reps = 7 if args.quick else args.reps
    header("run_cpu: CPU of one run with agent `true`  vs  python -c 'subprocess.run([true])'")
    with Workspace("run_cpu") as ws:
        daemon_runs = daemon_per_run(ws, 10 if args.quick else 30)
        tpl = template(ws)
        subject(ws, tpl, ["tick", "--wait"])  # warm-up
        subject(ws, tpl, ["run", "cpu"])
        cpu_of(BASELINE)
        base, tick, run = [], [], []
        for _ in range(reps):
            base.append(cpu_of(BASELINE))
            tick.append(subject(ws, tpl, ["tick", "--wait"]))
            run.append(subject(ws, tpl, ["run", "cpu"]))
    for label, xs in (("baseline", base), ("tick --wait", tick), ("run NAME", run)):
        print(f"   {label:>12}: CPU median {median(xs) * 1e3:.1f} ms "
              f"(min {min(xs) * 1e3:.1f}, max {max(xs) * 1e3:.1f})")
    print(f"   {'daemon':>12}: CPU per run {daemon_runs * 1e3:.1f} ms (mean over a window)")
    r_daemon = daemon_runs / median(base)
    r_tick = median(tick) / median(base)
    r_run = median(run) / median(base)
    result("run_cpu_daemon", f"{r_daemon:.2f}x CPU", "<= 1x", r_daemon <= 1, ratio=r_daemon,
           subject_ms=daemon_runs * 1e3, baseline_ms=median(base) * 1e3,
           command="loopctl daemon firing an every-1s loop (command true), CPU per run  vs  "
           + " ".join(BASELINE))
    result("run_cpu_tick", f"{r_tick:.2f}x CPU", "<= 2.8x", r_tick <= 2.8, ratio=r_tick,
           subject_ms=median(tick) * 1e3, baseline_ms=median(base) * 1e3, reps=reps,
           command="loopctl tick --wait (one due loop, command true)  vs  " + " ".join(BASELINE))
    result("run_cpu_run", f"{r_run:.2f}x CPU", "<= 2.5x", r_run <= 2.5, ratio=r_run,
           subject_ms=median(run) * 1e3, baseline_ms=median(base) * 1e3, reps=reps,
           command="loopctl run NAME (command true)  vs  " + " ".join(BASELINE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
