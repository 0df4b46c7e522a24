"""What slots cost (issue 50, DESIGN §20).

1. Per run: claiming and recording a slot, in this process: the pass's
   `slots.walk_due` and `due_slot` (the missed count, the latest cron
   instant, the served check) and a scheduled `lifecycle.claim` that
   remembers the slot, then the entry as JSON (state.json's share), vs the
   missed count and the same claim as a manual fire (no slot looked up or
   remembered) on the same entry; and `run --scheduled`'s
   `slots.for_scheduled`. Goal: the difference is at most 1 ms a run.
2. `loopctl tick` over N hourly cron loops that are all due (10,000;
   `--quick` 2,000), `max_concurrent: 4` (4 fire, the rest queue: every due
   loop's slot is looked up), each repetition on a fresh copy of one home,
   vs the same tick with the slot bookkeeping bypassed (`slots.due_slot`,
   `served`, `remember` and `deferral` replaced by no-ops before the CLI
   starts; both run through the same `python -c` prelude), interleaved.
   Goal: within 1.1x, on CPU (user+sys of the tick).

Ratios against the baseline of the same run; times are printed, never
asserted.

    python bench/slots.py [--quick] [--loops N] [--reps N]
"""

from __future__ import annotations

import argparse
import copy
import json
import resource
import shutil
import statistics
import subprocess
import sys
import time
from datetime import timezone
from pathlib import Path

from _common import PY, Workspace, copy_home, env_for, iso_now, write_loops

RUN = "import sys; from loopctl.entry import main; main(program=True)"
BYPASS = ("from loopctl.domain import slots as s; "
          "s.due_slot = lambda loop, st, due, now, zone, latest=None: (due, None, None); "
          "s.served = lambda st, instant, width=0.0: None; "
          "s.remember = lambda st, instant, how: None; "
          "s.deferral = lambda st: None; "
          "from loopctl.domain.schedule import missed_count as m; "
          "s.walk_due = lambda loop, due, now, zone: (m(loop, due, now, zone=zone), None); ")


def per_run(n: int) -> dict[str, float]:
    """Microseconds per call: scheduled claim with its slot, manual claim,
    `for_scheduled`."""
    from loopctl.domain import lifecycle, slots
    from loopctl.domain.model import parse_loop
    from loopctl.domain.schedule import missed_count
    from loopctl.domain.state import new_loop_state

    zone = timezone.utc
    loop = parse_loop("b", {"prompt": "p", "cron": "0 * * * *"})
    made = 1_767_225_780.0  # 2026-01-01T00:03:00Z
    template = new_loop_state(loop, made, zone=zone)
    due, now = made + 57 * 60, made + 58 * 60  # the 01:00 slot, a minute late

    def scheduled() -> None:
        st = copy.copy(template)
        _, latest = slots.walk_due(loop, due, now, zone)
        instant, _, _ = slots.due_slot(loop, st, due, now, zone, latest)
        lifecycle.claim(loop, st, now, "schedule", zone=zone, instant=instant)
        json.dumps(st)

    def manual() -> None:  # what the pass computes without slots: the missed count
        st = copy.copy(template)
        missed_count(loop, due, now, zone=zone)
        lifecycle.claim(loop, st, now, "manual", zone=zone)
        json.dumps(st)

    def external() -> None:
        slots.for_scheduled(loop, copy.copy(template), now, zone)

    out: dict[str, list[float]] = {"scheduled": [], "manual": [], "for_scheduled": []}
    for _ in range(5):  # interleaved rounds; the median round counts
        for name, fn in (("scheduled", scheduled), ("manual", manual),
                         ("for_scheduled", external)):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            out[name].append((time.perf_counter() - t0) / n * 1e6)
    return {k: statistics.median(v) for k, v in out.items()}


def template(ws: Workspace, loops: int) -> Path:
    home = ws.home(f"cron{loops}")
    entries = [f"  c{i:05d}:\n    prompt: bench\n    command: [\"true\"]\n"
               f"    cron: \"0 * * * *\"\n    tz: UTC\n    timeout: 1h\n"
               f"    cwd: {json.dumps(str(ws.root))}\n    created_at: {json.dumps(iso_now())}\n"
               for i in range(loops)]
    write_loops(home, entries, top="max_concurrent: 4\n")
    proc = subprocess.run([PY, "-c", RUN, "tick", "--json"], env=env_for(home),
                          capture_output=True, text=True)
    assert proc.returncode == 0 and not json.loads(proc.stdout)["fired"], proc.stderr
    return home


def children_cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def tick_pair(ws: Workspace, tpl: Path, offset: float) -> dict[str, tuple[float, float]]:
    """One tick with slots and one bypassed, each on its own fresh copy."""
    out = {}
    for name, prelude in (("slots", ""), ("bypassed", BYPASS)):
        home = copy_home(tpl, ws.home(name))
        env = env_for(home, LOOPCTL_CLOCK_OFFSET=repr(offset))
        cpu, t0 = children_cpu(), time.perf_counter()
        proc = subprocess.run([PY, "-c", prelude + RUN, "tick", "--json"], env=env,
                              capture_output=True, text=True)
        wall, used = time.perf_counter() - t0, children_cpu() - cpu
        assert proc.returncode in (0, 75), proc.stderr
        assert len(json.loads(proc.stdout)["fired"]) == 4, proc.stdout[:300]
        out[name] = (wall, used)
        time.sleep(1.0)  # its four `true` runs end before the next tick
        shutil.rmtree(home, ignore_errors=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--loops", type=int, default=0)
    ap.add_argument("--reps", type=int, default=0)
    args = ap.parse_args()
    loops = args.loops or (2000 if args.quick else 10_000)
    reps = args.reps or (3 if args.quick else 5)
    micro = per_run(2000 if args.quick else 5000)
    extra_ms = (micro["scheduled"] - micro["manual"]) / 1000
    print(f"per run: scheduled claim with its slot {micro['scheduled']:.1f} us, manual claim "
          f"{micro['manual']:.1f} us: the slot adds {extra_ms * 1000:.1f} us "
          f"(goal <= 1000 us); run --scheduled's for_scheduled {micro['for_scheduled']:.1f} us",
          flush=True)
    with Workspace("slots") as ws:
        tpl = template(ws, loops)
        next_hour = (int(time.time()) // 3600 + 1) * 3600
        offset = next_hour + 120 - time.time()  # every loop's slot due, 2 minutes late
        pairs = [tick_pair(ws, tpl, offset) for _ in range(reps)]
    ratios = {clock: statistics.median(p["slots"][i] / p["bypassed"][i] for p in pairs)
              for i, clock in enumerate(("wall", "cpu"))}
    cpu = {k: statistics.median(p[k][1] for p in pairs) for k in ("slots", "bypassed")}
    print(f"tick, {loops} due cron loops, cap 4: CPU {cpu['slots']:.3f} s with slots, "
          f"{cpu['bypassed']:.3f} s bypassed: {ratios['cpu']:.3f}x CPU, "
          f"{ratios['wall']:.3f}x wall (goal <= 1.1x CPU; median of {reps} pairs)", flush=True)
    met = extra_ms <= 1.0 and ratios["cpu"] <= 1.1
    rows = [{"bench": "slots", "case": "per run", "value": extra_ms, "unit": "ms",
             "goal": "<= 1 ms", "met": extra_ms <= 1.0},
            {"bench": "slots", "case": f"tick {loops} due", "value": ratios["cpu"],
             "unit": "x CPU", "goal": "<= 1.1x", "met": ratios["cpu"] <= 1.1}]
    for row in rows:
        print("BENCH-RESULT " + json.dumps(row), flush=True)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
