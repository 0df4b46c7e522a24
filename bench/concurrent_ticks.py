"""50 `loopctl tick` processes started at once over 100 due loops vs one
`tick` over the same 100 due loops.

Goals (issue 7): exactly 100 runs; <= 5x wall time.

A template home with 100 loops (agent `true`, due two seconds after
creation, then hourly) is reconciled by one tick before they are due, then
left until all are due. Each repetition copies it (re-pointing state's
loops.yaml signature at the copy) and either starts 50 ticks back to back
(wall = first start until the last of the 50 exits) or one tick (wall = its
exit). Either way it then waits for every supervisor (the benchmark is a
child subreaper, so the detached supervisors are re-parented to it) and
counts the run records: exactly one per loop, 100 in all. One and fifty
alternate; medians compared. Also reported: ticks that exited non-zero (with
their message), the time until every run has settled, and the CPU of all
ticks, supervisors and agents (RUSAGE_CHILDREN: the benchmark reaps them all).
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import (
    Workspace,
    become_subreaper,
    children_cpu,
    copy_home,
    env_for,
    header,
    loop_entry,
    loopctl,
    median,
    past_wake,
    reconciled,
    result,
    run_records,
    spread,
    wait_quiet,
)

LOOPS = 100
ERRORS: collections.Counter[tuple[int, str]] = collections.Counter()
# Per repetition: (seconds until every supervisor has exited, CPU seconds of
# every tick, supervisor and agent), keyed by the number of ticks.
EXTRA: collections.defaultdict[int, list[tuple[float, float]]] = collections.defaultdict(list)


def template(ws: Workspace) -> Path:
    home = ws.home("template")
    # All at once: the race of many drivers, not the cap (bench/cap.py).
    # Due past a minute tick's 15 s early fire (domain/schedule.tick_early):
    # the reconciling tick fires nothing.
    reconciled(home, [loop_entry(f"loop{i:03d}", ["true"], every="1h", after="20s")
                      for i in range(LOOPS)], top="max_concurrent: 0\n")
    past_wake(home)
    return home


def one(ws: Workspace, tpl: Path, ticks: int) -> tuple[float, int, list[str], list[int]]:
    """(wall seconds, runs recorded, loops fired other than once, exit codes)."""
    home = copy_home(tpl, ws.home(f"x{ticks}"))
    env = env_for(home)
    try:
        cpu0 = children_cpu()
        t0 = time.perf_counter()
        errs = [tempfile.TemporaryFile() for _ in range(ticks)]  # noqa: SIM115
        procs = [subprocess.Popen(loopctl("tick"), env=env, stdout=subprocess.DEVNULL,
                                  stderr=err) for err in errs]
        codes = [p.wait() for p in procs]
        elapsed = time.perf_counter() - t0
        for code, err in zip(codes, errs, strict=True):
            if code != 0:
                err.seek(0)
                msg = err.read().decode(errors="replace").strip().replace(str(home), "HOME")
                ERRORS[(code, msg[:200])] += 1
            err.close()
        wait_quiet(300)
        settled = time.perf_counter() - t0
        cpu = children_cpu() - cpu0
        EXTRA[ticks].append((settled, cpu))
        records = run_records(home)
        per_loop = collections.Counter(p.parent.name for p in records)
        wrong = [f"loop{i:03d}" for i in range(LOOPS) if per_loop[f"loop{i:03d}"] != 1]
        outcomes = collections.Counter(json.loads(p.read_text()).get("outcome")
                                       for p in records)
        if set(outcomes) != {"ok"}:
            print(f"   note: outcomes {dict(outcomes)}")
        return elapsed, len(records), wrong, codes
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="3 repetitions instead of 5")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ticks", type=int, default=50)
    args = ap.parse_args()
    reps = 3 if args.quick else args.reps
    become_subreaper()
    header(f"concurrent_ticks: {args.ticks} ticks at once over {LOOPS} due loops  vs  one tick")
    with Workspace("concurrent") as ws:
        tpl = template(ws)
        many, single, counts, bad_codes, wrong_all = [], [], [], [], set()
        for _ in range(reps):
            t1, n1, w1, c1 = one(ws, tpl, 1)
            single.append(t1)
            tn, nn, wn, cn = one(ws, tpl, args.ticks)
            many.append(tn)
            counts += [n1, nn]
            wrong_all.update(w1 + wn)
            bad_codes += [c for c in c1 + cn if c != 0]
            print(f"   rep: 1 tick {t1 * 1e3:.0f} ms ({n1} runs); {args.ticks} ticks "
                  f"{tn * 1e3:.0f} ms ({nn} runs)", flush=True)
    print(f"   1 tick   : {spread(single)}")
    print(f"   {args.ticks} ticks : {spread(many)}")
    for n in (1, args.ticks):
        settled = median([e[0] for e in EXTRA[n]])
        cpu = median([e[1] for e in EXTRA[n]])
        print(f"   {n:>2} tick(s): all {LOOPS} runs settled after {settled:.1f} s (median); "
              f"CPU of ticks + supervisors + agents {cpu:.1f} s")
    if bad_codes:
        print(f"   tick exit codes other than 0: {dict(collections.Counter(bad_codes))}")
        for (code, msg), n in ERRORS.most_common():
            print(f"     {n} x exit {code}: {msg}")
    ratio = median(many) / median(single)
    exact = all(n == LOOPS for n in counts) and not wrong_all
    print(f"   runs per repetition: {counts} (every loop exactly once: {not wrong_all})")
    result("concurrent_ticks", f"{ratio:.2f}x wall; runs {min(counts)}..{max(counts)}",
           "exactly 100 runs; <= 5x", exact and ratio <= 5, ratio=ratio, exact=exact,
           runs=counts, reps=reps, nonzero_exits=len(bad_codes),
           errors=[f"{n} x exit {c}: {m}" for (c, m), n in ERRORS.most_common()],
           subject_ms=median(many) * 1e3,
           baseline_ms=median(single) * 1e3,
           cpu_s={n: round(median([e[1] for e in EXTRA[n]]), 2) for n in (1, args.ticks)},
           settled_s={n: round(median([e[0] for e in EXTRA[n]]), 2) for n in (1, args.ticks)},
           command=f"{args.ticks} x `loopctl tick` started at once vs 1 x `loopctl tick`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
