"""What one run fired by a warm `loopctl daemon` costs (not part of run_all).

A daemon fires one `every: 1s` loop (`command: [true]`, `sandbox: off`).

    python bench/profiling/daemon_fire.py cg [--runs 10] [--tree DIR]
    python bench/profiling/daemon_fire.py faults [--runs 20] [--tree DIR]

`cg`: the daemon under callgrind with `--trace-children=yes
--dump-before=fork`, each process's counters dumped (and zeroed) before
each fork: a daemon part is one cycle of its own (the passes between two
fires; a daemon with warm supervisors forks once, and its part after that
fork is divided by the runs), a supervisor's part between two agent forks
is one run's work, `true` is the agent. Prints the medians and their sum,
instructions per fire.
`faults`: /proc/PID/stat of the daemon and its warm supervisors over a
window of runs, read when no run is in flight: their own minor faults and
CPU, and those of the children they reaped (agents, retired supervisors),
per run.
`--tree`: run another checkout's loopctl (PYTHONPATH; cwd is the temp dir,
so `python -m loopctl` does not pick up the current folder's).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

LOOPS = ('version: 1\nloops:\n  warm:\n    prompt: bench\n    command: ["true"]\n'
         '    every: 1s\n    cwd: "/tmp"\n    timeout: 1h\n    sandbox: "off"\n    max_runs: 0\n')


def records(home: Path) -> int:
    runs = home / "state" / "runs"
    return sum(1 for p in runs.glob("*/*.json")
               if not p.name.endswith(".decision.json")) if runs.is_dir() else 0


def stat_of(pid: int) -> list[int]:
    """minflt, cminflt, utime, stime, cutime, cstime (clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return [int(fields[i]) for i in (7, 8, 11, 12, 13, 14)]


def tree_stat(daemon: psutil.Process, home: Path) -> list[int] | None:
    """stat_of summed over the daemon and its warm supervisors (waiting for
    a run, so what they reaped is in their counters), or None while a run
    is in flight."""
    try:
        workers = daemon.children()
        if any(w.children() for w in workers) or b'"busy":true' in \
                (home / "state" / "summary.json").read_bytes():
            return None
        rows = [stat_of(p.pid) for p in (daemon, *workers)]
    except (psutil.Error, OSError):
        return None
    return [sum(col) for col in zip(*rows, strict=True)]


def settled(proc: subprocess.Popen[bytes], home: Path, count: int) -> tuple[int, list[int]]:
    daemon = psutil.Process(proc.pid)
    while proc.poll() is None:
        done = records(home)
        now = tree_stat(daemon, home) if done >= count else None
        if now is not None and records(home) == done:
            return done, now
        time.sleep(0.01)
    raise RuntimeError("the daemon exited")


def cg_figures(out: Path, daemon: int) -> None:
    parts: dict[int, dict[int, int]] = {}
    for f in out.glob("cg.*"):
        m = re.fullmatch(r"cg\.(\d+)(?:\.(\d+))?", f.name)
        if m is None:
            continue
        total = re.search(r"^(?:summary|totals):\s+(\d+)", f.read_text(errors="replace"), re.M)
        assert total is not None, f
        parts.setdefault(int(m.group(1)), {})[int(m.group(2) or 0)] = int(total.group(1))
    own = parts.pop(daemon)
    agents = [sum(p.values()) for p in parts.values() if sum(p.values()) <= 1_000_000]
    workers = [p for p in parts.values() if sum(p.values()) > 1_000_000]
    if len(own) > 3:  # a supervisor forked per run (before warm supervisors)
        # Part 1 is start-up, 2 the first cycle, 0 what followed the last fork.
        cycles = [own[k] for k in sorted(own) if k >= 3]
        sups = [sum(p.values()) for p in workers][1:]  # the first imports what later ones find
    else:
        # Forked once: everything after start-up over the runs it fired.
        cycles = [own.get(0, 0) / max(len(agents), 1)]
        # A warm supervisor's part between two agent forks is one run's
        # work (the end of one, the start of the next); not its first
        # (first-time imports) or its last (its idle end).
        sups = [w[k] for w in workers for k in sorted(w) if 2 <= k < max(w)]
    d, s, a = (statistics.median(xs) / 1e6 for xs in (cycles, sups, agents))
    print(f"daemon per cycle {d:.2f}M (n={len(cycles)}), supervisor {s:.2f}M (n={len(sups)}), "
          f"true {a:.2f}M: {d + s + a:.2f}M instructions per fire")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("mode", choices=("cg", "faults"))
    ap.add_argument("--runs", type=int, default=0)
    ap.add_argument("--tree", help="a loopctl checkout to run instead of the installed one")
    args = ap.parse_args()
    runs = args.runs or (10 if args.mode == "cg" else 20)
    root = Path(tempfile.mkdtemp(prefix="loopctl-daemon-fire-"))
    home, out = root / "home", root / "cg"
    home.mkdir(mode=0o700)
    out.mkdir()
    (home / "loops.yaml").write_text(LOOPS)
    (home / "loops.yaml").chmod(0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPCTL_")}
    env.update(LOOPCTL_HOME=str(home), NO_COLOR="1")
    if args.tree:
        env["PYTHONPATH"] = str(Path(args.tree).resolve())
    cmd = [sys.executable, "-m", "loopctl", "daemon", "--quiet"]
    if args.mode == "cg":
        cmd = ["valgrind", "--tool=callgrind", "--trace-children=yes", "--dump-before=fork",
               f"--callgrind-out-file={out}/cg.%p", *cmd]
    proc = subprocess.Popen(cmd, env=env, cwd=root, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        first, s0 = settled(proc, home, 2)
        last, s1 = settled(proc, home, first + runs)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    try:
        if args.mode == "cg":
            cg_figures(out, proc.pid)
        else:
            per = [(b - a) / (last - first) for a, b in zip(s0, s1, strict=True)]
            ms = 1000 / os.sysconf("SC_CLK_TCK")
            own, reaped = (per[2] + per[3]) * ms, (per[4] + per[5]) * ms
            print(f"per run: daemon + warm supervisors {per[0]:.0f} minor faults, {own:.1f} ms "
                  f"CPU; what they reaped (agents) {per[1]:.0f} minor faults, {reaped:.1f} ms CPU")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
