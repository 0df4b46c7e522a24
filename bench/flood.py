"""A scheduled run whose agent writes N bytes to stdout, vs the same agent
redirected by `sh -c 'agent > file'`.

Goals (issue 7): <= 1.1x wall time at 1 GiB; the supervisor's peak RSS
<= 40 MiB and flat from 1 MiB to 1 GiB of output. Issue 15: the same for a
run fired by `loopctl daemon` (see `daemon_runs`).

Subject: a fresh home with one due loop whose command is
`head -c N /dev/zero`, fired by `loopctl tick --wait` (the scheduled path:
tick -> detached supervisor -> agent writing straight into the run log).
Wall time is tick start to tick exit (tick --wait waits for the supervisor,
which records and settles before exiting). Baseline: `sh -c 'head -c N
/dev/zero > FILE'` on the same file system. The two alternate.

Peak RSS is measured in separate repetitions (so sampling does not perturb
the timings): the benchmark finds the supervisor (the tick's child that
leads a session of its own: it is forked from the tick) and every ~1 ms reads
its RSS and /proc/PID/status VmHWM (the kernel's own high-water mark, so a
peak between samples is still seen, up to the last read before exit).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
from _common import (
    Workspace,
    daemon_cpu,
    env_for,
    header,
    loop_entry,
    loopctl,
    median,
    result,
    run_in_flight,
    spread,
    start_daemon,
    stop,
    timed,
    wait_until,
    write_loops,
)

MiB = 1024 * 1024
SIZES = [("1 MiB", MiB), ("64 MiB", 64 * MiB), ("1 GiB", 1024 * MiB)]


def agent(size: int) -> list[str]:
    return ["head", "-c", str(size), "/dev/zero"]


def fresh_home(ws: Workspace, size: int):  # type: ignore[no-untyped-def]
    home = ws.home("flood")
    # --max-log above the flood: the whole of it goes through the log pump.
    write_loops(home, [loop_entry("flood", agent(size), every="1h", cwd=str(ws.root),
                                  max_log="2GiB")])
    return home


def vm_hwm_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def run_subject(ws: Workspace, size: int, sample: bool) -> tuple[float, float | None]:
    """(wall seconds, supervisor peak RSS in MiB or None)."""
    home = fresh_home(ws, size)
    env = env_for(home)
    try:
        if not sample:
            elapsed = timed(loopctl("tick", "--wait"), env)
            logs = list((home / "state" / "runs" / "flood").glob("*.log"))
            if len(logs) != 1 or logs[0].stat().st_size < size:
                raise RuntimeError(f"expected one log of >= {size} bytes, got "
                                   f"{[(p.name, p.stat().st_size) for p in logs]}")
            return elapsed, None
        t0 = time.perf_counter()
        tick = subprocess.Popen(loopctl("tick", "--wait"), env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        parent = psutil.Process(tick.pid)
        sup: psutil.Process | None = None
        peak_kib = 0
        while tick.poll() is None:
            try:
                if sup is None:
                    for child in parent.children():
                        # The supervisor is forked from the tick (same
                        # cmdline) into a session of its own; older loopctl
                        # exec'd `python -m loopctl.engine.supervisor`.
                        line = " ".join(child.cmdline())
                        if "loopctl.engine.supervisor" in line or "loopctl" in line and \
                                child.pid == os.getsid(child.pid):
                            sup = child
                            break
                if sup is not None:
                    peak_kib = max(peak_kib, sup.memory_info().rss // 1024)
                    hwm = vm_hwm_kib(sup.pid)
                    if hwm:
                        peak_kib = max(peak_kib, hwm)
            except psutil.Error:
                pass
            time.sleep(0.001)  # fine enough to see the peak just before it exits
        elapsed = time.perf_counter() - t0
        _, err = tick.communicate()
        if tick.returncode != 0:
            raise RuntimeError(f"tick --wait exited {tick.returncode}: {err.decode()[:300]}")
        return elapsed, (peak_kib / 1024 if sup is not None else None)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def daemon_runs(ws: Workspace, size: int, reps: int, sample: bool,
                baseline: list[tuple[float, float]]) -> list[tuple[float, float, float | None]]:
    """Runs fired by a `loopctl daemon`, supervised by its warm supervisors
    (engine/warm.py; before them, a supervisor forked per run). Each
    repetition adds a loop with `loopctl start` (a new loop is due at once;
    the daemon sees the file change and fires it), so no run overlaps a
    baseline.

    Per run: wall = from the moment the run's log appears (the daemon makes
    it just before it hands the run to a supervisor; polled every ~0.5 ms)
    to the moment the run is settled (its record written, state.json's
    summary no longer busy, no supervisor with a child); CPU = the growth of
    the CPU of the daemon, its live supervisors and everything they reaped
    (the agent). Peak RSS: the supervisors' VmHWM, reset before each run
    (`/proc/PID/clear_refs`). One baseline (wall, CPU) precedes each run,
    appended to `baseline`, so each run has its pair; `sync` before each
    measurement, so none pays for another's writeback."""
    home = ws.home("dflood")
    env = env_for(home)
    proc = start_daemon(home, "--quiet", env=env)
    daemon = psutil.Process(proc.pid)
    out: list[tuple[float, float, float | None]] = []
    pairs: list[tuple[float, float]] = []
    try:
        for n in range(reps + 1):  # the first is a warm-up
            os.sync()
            pairs.append(run_baseline_cpu(ws, size))
            os.sync()
            for worker in daemon.children():
                reset_peak(worker.pid)
            cpu0 = sum(daemon_cpu(daemon))
            subprocess.run(loopctl("start", "--name", f"flood{n}", "--every", "1h",
                                   "--max-log", "2GiB", "--cwd", str(ws.root),
                                   "--command", " ".join(agent(size)), "bench"),
                           env=env, check=True, stdout=subprocess.DEVNULL)
            runs = home / "state" / "runs" / f"flood{n}"
            wait_until(lambda folder=runs: any(folder.glob("*.log")),
                       f"the daemon's run of flood{n} in {home}", step=0.0005)
            t0 = time.perf_counter()
            peak_kib = 0
            while not settled(home, runs, daemon):
                if sample:
                    for worker in daemon.children():
                        peak_kib = max(peak_kib, vm_hwm_kib(worker.pid) or 0)
                time.sleep(0.0005)
            wall = time.perf_counter() - t0
            out.append((wall, sum(daemon_cpu(daemon)) - cpu0, peak_kib / 1024 if sample else None))
            drop_log(home, f"flood{n}", size)
    finally:
        stop(proc)
        shutil.rmtree(home, ignore_errors=True)
    baseline.extend(pairs[1:])
    return out[1:]


def settled(home: Path, runs: Path, daemon: psutil.Process) -> bool:
    records = [p for p in runs.glob("*.json") if not p.name.endswith(".decision.json")]
    return bool(records) and not run_in_flight(home, daemon)


def reset_peak(pid: int) -> None:
    """VmHWM back to the current RSS (Linux: `5` to clear_refs)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        pass


def drop_log(home: Path, loop: str, size: int) -> None:
    """Check the run's log holds the flood, then delete it, as the baseline
    deletes its file. Kept, each log would hold on to 1 GiB of page cache, and
    every next baseline would pay for memory the VM had never handed out
    (measured: 2.2 s instead of 0.8 s for the same `head -c 1G` into tmpfs),
    while the run after it reused the pages that baseline had just freed."""
    logs = list((home / "state" / "runs" / loop).glob("*.log"))
    if len(logs) != 1 or logs[0].stat().st_size < size:
        raise RuntimeError(f"expected one log of >= {size} bytes for {loop}, got "
                           f"{[(p.name, p.stat().st_size) for p in logs]}")
    logs[0].unlink()


def run_baseline(ws: Workspace, size: int) -> float:
    return run_baseline_cpu(ws, size)[0]


def run_baseline_cpu(ws: Workspace, size: int) -> tuple[float, float]:
    """(wall, user+sys CPU of sh and head) of the shell redirect."""
    out = ws.root / "baseline.out"
    cmd = " ".join(agent(size)) + f" > {out}"
    try:
        t0 = time.perf_counter()
        child = subprocess.Popen(["sh", "-c", cmd])
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - t0
        if status != 0:
            raise RuntimeError(f"baseline {cmd!r} failed: {status}")
        return wall, usage.ru_utime + usage.ru_stime
    finally:
        out.unlink(missing_ok=True)


def paired(subject: list[float], base: list[float]) -> float:
    """The median of per-pair ratios: each run against the baseline measured
    right before it, so a slow stretch of the disk hits both of a pair."""
    return median([s / b for s, b in zip(subject, base, strict=True)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="skip the 1 GiB size")
    ap.add_argument("--reps", type=int, default=0, help="timing repetitions per size")
    ap.add_argument("--daemon-only", action="store_true",
                    help="only the daemon-fired runs at the largest size")
    ap.add_argument("--dir", default=None,
                    help="where the homes and the baseline's file go (default: the temp "
                         "dir; /dev/shm takes the disk's writeback out of both sides)")
    args = ap.parse_args()
    sizes = SIZES[:2] if args.quick else SIZES
    header("flood: scheduled run writing N bytes (tick --wait)  vs  sh -c 'agent > file'")
    rows = []
    with Workspace("flood", args.dir) as ws:
        free = shutil.disk_usage(ws.root).free
        if free < 3 * sizes[-1][1]:
            print(f"   not enough free space in {ws.root} for {sizes[-1][0]}", file=sys.stderr)
            return 2
        for label, size in [] if args.daemon_only else sizes:
            reps = args.reps or (3 if size >= 1024 * MiB else 5 if size >= 64 * MiB else 9)
            run_baseline(ws, size)  # warm-up
            run_subject(ws, size, sample=False)
            subject, base = [], []
            for _ in range(reps):
                os.sync()  # each measurement starts with no dirty pages of the last
                base.append(run_baseline(ws, size))
                os.sync()
                subject.append(run_subject(ws, size, sample=False)[0])
            peaks = [p for _ in range(3) if (p := run_subject(ws, size, sample=True)[1])]
            ratio = paired(subject, base)
            peak = max(peaks) if peaks else float("nan")
            rows.append((label, size, ratio, peak, median(subject), median(base)))
            print(f"   {label:>7}: baseline {spread(base)}")
            print(f"   {label:>7}: loopctl  {spread(subject)}")
            print(f"   {label:>7}: ratio {ratio:.2f}x, supervisor peak RSS "
                  f"{peak:.1f} MiB (runs: {', '.join(f'{p:.1f}' for p in peaks)})", flush=True)
        # Issue 15: the same flood fired by a warm daemon.
        label, size = sizes[-1]
        reps = args.reps or (9 if size >= 1024 * MiB else 15)
        d_base: list[tuple[float, float]] = []
        d_runs = daemon_runs(ws, size, reps, False, d_base)
        d_peaks = [p for _, _, p in daemon_runs(ws, size, 3, True, []) if p]
        d_wall, d_cpu = [w for w, _, _ in d_runs], [c for _, c, _ in d_runs]
        b_wall, b_cpu = [w for w, _ in d_base], [c for _, c in d_base]
        d_ratio = paired(d_wall, b_wall)
        cpu_ratio = median(d_cpu) / median(b_cpu)
        print(f"   daemon-fired {label}: baseline {spread(b_wall)}; CPU {spread(b_cpu)}")
        print(f"   daemon-fired {label}: loopctl  {spread(d_wall)}; CPU {spread(d_cpu)}")
        print(f"   daemon-fired {label}: per-pair wall ratios "
              f"{', '.join(f'{s / b:.2f}' for s, b in zip(d_wall, b_wall, strict=True))}")
        print(f"   daemon-fired {label}: wall {d_ratio:.2f}x (median of pairs), "
              f"{median(d_wall) / median(b_wall):.2f}x (ratio of medians); CPU "
              f"{cpu_ratio:.2f}x; supervisor peak RSS {max(d_peaks):.1f} MiB")
    result("flood_daemon_wall", f"{d_ratio:.2f}x wall at {label}", "<= 1.1x at 1 GiB",
           d_ratio <= 1.1, ratio=d_ratio, size=label, subject_s=median(d_wall),
           baseline_s=median(b_wall), cpu_ratio=cpu_ratio, subject_cpu_s=median(d_cpu),
           baseline_cpu_s=median(b_cpu), peak_rss_mib=max(d_peaks), dir=str(ws.root),
           command="loopctl daemon firing a loop just added by `start` (head -c N "
                   "/dev/zero), supervisor lifetime  vs  sh -c 'head -c N /dev/zero > file' "
                   "right before it; median of per-pair ratios")
    if not rows:
        return 0
    label, _, ratio, _, subj, base = rows[-1]
    peaks = [r[3] for r in rows]
    growth = max(peaks) - peaks[0]
    flat = growth <= max(2.0, 0.1 * peaks[0])
    print(f"   peak RSS from {rows[0][0]} to {label}: {peaks[0]:.1f} -> {peaks[-1]:.1f} MiB "
          f"(growth {growth:+.1f} MiB; flat = within max(2 MiB, 10%))")
    # Marginal cost per byte: the slope from the smallest to the largest size,
    # which takes out the fixed cost of starting tick + supervisor.
    s0, b0 = rows[0][4], rows[0][5]
    marginal = (subj - s0) / (base - b0) if base > b0 else float("nan")
    fixed = s0 - b0
    print(f"   fixed overhead (loopctl - baseline at {rows[0][0]}): {fixed * 1e3:.0f} ms; "
          f"marginal ratio {rows[0][0]} -> {label}: {marginal:.2f}x "
          f"(1.0 = every extra byte costs what it costs with `> file`)")
    at = "" if label == "1 GiB" else f" (at {label}; goal is stated at 1 GiB)"
    result("flood_wall", f"{ratio:.2f}x wall at {label}", "<= 1.1x at 1 GiB", ratio <= 1.1,
           ratio=ratio, size=label, subject_s=subj, baseline_s=base, note=at.strip(),
           fixed_overhead_ms=fixed * 1e3, marginal_ratio=marginal,
           per_size={r[0]: round(r[2], 3) for r in rows},
           command="loopctl tick --wait (loop command: head -c N /dev/zero)  vs  "
                   "sh -c 'head -c N /dev/zero > file'")
    result("flood_rss", f"{max(peaks):.1f} MiB peak ({peaks[0]:.1f} -> {peaks[-1]:.1f})",
           "<= 40 MiB, flat", max(peaks) <= 40 and flat, peaks_mib={r[0]: round(r[3], 1)
                                                                   for r in rows},
           command="psutil RSS + /proc/PID/status VmHWM of the forked supervisor "
                   "every 1 ms")
    return 0


if __name__ == "__main__":
    os.umask(0o077)
    sys.exit(main())
