"""`loopctl daemon` idle for 60 s with 100 loops due in an hour.

Goal (issue 7): <= 0.5 s of CPU in that minute. No baseline: the figure is
CPU seconds per minute of idling.

The daemon is started through the console script with 100 loops first due
in an hour, given a warm-up (it takes the lease and makes its first pass),
then its CPU time (user + system, itself and any children it reaped) is read
with psutil before and after the idle window. `--seconds N` shortens the
window; the figure is then scaled to a minute. Voluntary context switches are
reported too: they count the daemon's wake-ups.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import psutil
from _common import (
    Workspace,
    env_for,
    header,
    loop_entry,
    result,
    start_daemon,
    stop,
    write_loops,
)


def cpu_of(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


def schedstat_s(pid: int) -> float | None:
    """On-CPU time in ns resolution (Linux /proc/PID/schedstat; the daemon is
    single-threaded, so its main thread is all of it)."""
    try:
        with open(f"/proc/{pid}/schedstat") as fh:
            return int(fh.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=60.0, help="idle window (default 60)")
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--quick", action="store_true", help="a 20 s window")
    ap.add_argument("--loops", type=int, default=100, help="loops defined (issue 15: 10000)")
    args = ap.parse_args()
    window = 20.0 if args.quick and args.seconds == 60.0 else args.seconds
    n = args.loops
    header(f"daemon_idle: `loopctl daemon`, {n} loops due in an hour, idle {window:g} s")
    with Workspace("daemon_idle") as ws:
        home = ws.home()
        write_loops(home, [loop_entry(f"loop{i:05d}", ["true"], every="1h", after="1h")
                           for i in range(n)])
        env = env_for(home)
        daemon = start_daemon(home, env=env, stderr=subprocess.PIPE)
        try:
            proc = psutil.Process(daemon.pid)
            deadline = time.monotonic() + 300  # 10,000 loops: the first pass parses YAML
            while time.monotonic() < deadline and daemon.poll() is None:
                try:
                    if len(json.loads((home / "state" / "state.json").read_text())["loops"]) == n:
                        break
                except (OSError, ValueError, KeyError):
                    pass
                time.sleep(0.2)
            time.sleep(args.warmup)
            if daemon.poll() is not None:
                raise RuntimeError(f"daemon exited {daemon.returncode}: "
                                   f"{daemon.stderr.read().decode()[:300]}")  # type: ignore
            state = json.loads((home / "state" / "state.json").read_text())
            lease = json.loads((home / "state" / "lease.json").read_text())
            assert lease["pid"] == daemon.pid, lease
            assert len(state["loops"]) == n
            warm_cpu = cpu_of(proc)
            c0, s0 = cpu_of(proc), proc.num_ctx_switches().voluntary
            ns0 = schedstat_s(daemon.pid)
            t0 = time.monotonic()
            time.sleep(window)
            c1, s1 = cpu_of(proc), proc.num_ctx_switches().voluntary
            ns1 = schedstat_s(daemon.pid)
            elapsed = time.monotonic() - t0
        finally:
            stop(daemon, 20)
            code = daemon.returncode
        runs = list((home / "state" / "runs").glob("*/*.json")) \
            if (home / "state" / "runs").is_dir() else []
    used = c1 - c0
    per_min = used * 60.0 / elapsed
    print(f"   start-up + first pass: {warm_cpu:.3f} s CPU (not counted)")
    print(f"   idle window {elapsed:.1f} s: {used:.3f} s CPU, "
          f"{(s1 - s0) / elapsed:.2f} wake-ups/s; per minute: {per_min:.3f} s CPU")
    if ns0 is not None and ns1 is not None:
        print(f"   same window by /proc/PID/schedstat (ns resolution): {ns1 - ns0:.4f} s CPU, "
              f"{(ns1 - ns0) * 60 / elapsed:.4f} s per minute")
    print(f"   daemon exit code after SIGTERM: {code}; runs fired: {len(runs)} (expected 0)")
    result("daemon_idle", f"{per_min:.3f} s CPU/min", "<= 0.5 s CPU/min",
           per_min <= 0.5 and not runs, cpu_s=used, window_s=elapsed, cpu_per_min=per_min,
           wakeups_per_s=(s1 - s0) / elapsed, exit_code=code,
           schedstat_per_min=((ns1 - ns0) * 60 / elapsed) if ns0 is not None and ns1 is not None
           else None,
           loops=n,
           command=f"loopctl daemon ({n} loops, --after 1h), idle {window:g} s after "
                   f"{args.warmup:g} s warm-up, psutil cpu_times")
    return 0


if __name__ == "__main__":
    sys.exit(main())
