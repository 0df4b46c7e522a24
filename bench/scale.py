"""Listing at scale, the way a user meets it (issue 30): `ls`, `ls --json`,
`status NAME` and an idle `tick` at 10, 1,000 and 10,000 loops.

Two cases, each measured on its own copy of a template home:
- `hand`: a `loops.yaml` written by hand (here: by this script) that no
  driver has seen: no state folder at all. The first command after the edit
  parses the YAML (and, being a reading command, saves the parsed copy); the
  first `tick` reconciles and writes state.json. Both are shown apart as
  `first`.
- `driven`: the same file after one driver pass (`loopctl tick`), as a cron
  tick leaves it.
For each case and command, every size gets a fresh copy, then the command
runs REPS times (default five) on each copy, sizes interleaved; the ratio
is the median against the median at 10 loops, in the same run.

Goals: `ls` within 2x of 10 loops at 1,000 and within 3x at 10,000 (aim 2x),
`status NAME` within 1.5x at both; `ls --json` no slower than
`ls` (same size, same case); the idle `tick` within 1.5x of 10 loops. The
last lines are a table of every ratio against its goal. Also reported: state.json bytes per loop
after the driver pass, and its growth per run (one loop run 20 times).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

from _common import (
    Workspace,
    become_subreaper,
    check,
    children_cpu,
    copy_home,
    env_for,
    header,
    loop_entry,
    loopctl,
    median,
    reconciled,
    result,
    spread,
    timed,
    wait_quiet,
    write_loops,
)

SIZES = (10, 1000, 10000)
COMMANDS = {
    "ls": ("ls",),
    "ls_json": ("ls", "--json"),
    "status": ("status", "idle00005"),
    "tick": ("tick",),
}
CASES = ("hand", "driven")
# Within this many times the 10-loop median, per command and size.
# `status NAME` within 1.5x at 10,000 (it reads its own loop).
GOALS = {"ls": {1000: 2.0, 10000: 3.0}, "status": {1000: 1.5, 10000: 1.5},
         "tick": {1000: 1.5, 10000: 1.5}}


def template(ws: Workspace, total: int, case: str) -> Path:
    home = ws.home(f"{case}{total}")
    entries = [loop_entry(f"idle{i:05d}", ["true"], every="1h", after="1h")
               for i in range(total)]
    if case == "driven":
        reconciled(home, entries)
    else:
        write_loops(home, entries)
    return home


def measure(ws: Workspace, templates: dict[int, Path], argv: tuple[str, ...],
            reps: int) -> dict[str, dict[int, list[float]]]:
    """REPS runs of `argv` on one fresh copy per size, sizes interleaved:
    wall seconds and CPU seconds (user + system) of each."""
    homes = {n: copy_home(tpl, ws.home(f"rep{n}")) for n, tpl in templates.items()}
    times: dict[str, dict[int, list[float]]] = {"wall": {n: [] for n in homes},
                                                "cpu": {n: [] for n in homes}}
    try:
        for _ in range(reps):
            for n, home in homes.items():
                cpu = children_cpu()
                times["wall"][n].append(timed(loopctl(*argv), env_for(home)))
                times["cpu"][n].append(children_cpu() - cpu)
    finally:
        for home in homes.values():
            shutil.rmtree(home, ignore_errors=True)
    return times


def state_growth(ws: Workspace, tpl: Path, runs: int = 20) -> dict[str, Any]:
    """state.json's bytes per loop, and what one loop's runs add to it."""
    home = copy_home(tpl, ws.home("growth"))
    state = home / "state" / "state.json"
    sizes = [state.stat().st_size]
    for _ in range(runs):
        check(loopctl("run", "idle00000"), env_for(home))
        wait_quiet()
        sizes.append(state.stat().st_size)
    shutil.rmtree(home, ignore_errors=True)
    return {"before": sizes[0], "after_1": sizes[1], "after_n": sizes[-1], "runs": runs,
            "max": max(sizes)}


Results = dict[str, dict[str, dict[str, dict[int, list[float]]]]]  # case, command, clock, size


def show(results: Results) -> None:
    for case in CASES:
        for what, argv in COMMANDS.items():
            print(f"   [{case}] loopctl {' '.join(argv)}")
            for n, wall in results[case][what]["wall"].items():
                cpu = results[case][what]["cpu"][n]
                rest = wall[1:] if case == "hand" else wall
                first = f" first {wall[0] * 1e3:.0f} ms;" if case == "hand" else ""
                print(f"      {n:>6} loops:{first} wall {spread(rest)}; CPU med "
                      f"{median(cpu) * 1e3:.0f} ms")


def ratio(results: Results, case: str, what: str, n: int, base_n: int, clock: str) -> float:
    data = results[case][what][clock]
    if what == "ls_json":  # against `ls` at the same size
        return median(data[n]) / median(results[case]["ls"][clock][n])
    return median(data[n]) / median(data[base_n])


def report(results: Results, reps: int, base_n: int) -> bool:
    """One result per case, command and size, then the table of them all.
    Judged on CPU time: on a shared machine wall time measures the
    neighbours (both are shown)."""
    ok, table = True, []
    for case in CASES:
        for what in COMMANDS:
            for n in results[case][what]["wall"]:
                if n == base_n:
                    continue
                cpu = ratio(results, case, what, n, base_n, "cpu")
                wall = ratio(results, case, what, n, base_n, "wall")
                against = "`ls` at the same size" if what == "ls_json" else f"{base_n} loops"
                goal = 1.0 if what == "ls_json" else GOALS.get(what, {}).get(n)
                met = goal is None or cpu <= goal
                ok = ok and met
                table.append((case, what, n, cpu, wall, against, goal, met))
                data = results[case][what]["wall"]
                result(f"scale_{case}_{what}_{n}", f"{cpu:.2f}x CPU, {wall:.2f}x wall of {against}",
                       f"<= {goal:g}x" if goal else "none (reported)", met, ratio=cpu,
                       wall_ratio=wall, subject_ms=median(data[n]) * 1e3,
                       baseline_ms=median(data[base_n]) * 1e3, first_ms=data[n][0] * 1e3,
                       cpu_ms=median(results[case][what]["cpu"][n]) * 1e3, reps=reps)
    print(f"\n   {'case':<7}{'command':<18}{'loops':>6}  {'CPU':>6}  {'wall':>6}  "
          f"{'goal':<32}met")
    for case, what, n, cpu, wall, against, goal, met in table:
        command = " ".join(COMMANDS[what])
        limit = f"<= {goal:g}x of {against}" if goal else "none"
        print(f"   {case:<7}{command:<18}{n:>6}  {cpu:>5.2f}x  {wall:>5.2f}x  {limit:<32}"
              f"{'yes' if met else 'NO'}")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="sizes 10 and 1,000 only")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)),
                    help="loop counts, the first being the baseline")
    ap.add_argument("--loops", type=int, help="one size against 10 (the older interface)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")] if args.loops is None else [10, args.loops]
    if args.quick:
        sizes = [n for n in sizes if n <= 1000]
    become_subreaper()
    header(f"scale: {', '.join(map(str, sizes))} loops, {args.reps} runs each")
    results: Results = {}
    with Workspace("scale") as ws:
        for case in CASES:
            templates = {n: template(ws, n, case) for n in sizes}
            results[case] = {what: measure(ws, templates, argv, args.reps)
                             for what, argv in COMMANDS.items()}
            if case == "driven":
                for n, tpl in templates.items():
                    size = (tpl / "state" / "state.json").stat().st_size
                    print(f"   state.json after one pass, {n} loops: {size} bytes "
                          f"({size / n:.0f} a loop)")
                growth = state_growth(ws, templates[sizes[0]])
                print(f"   state.json growth, one loop run {growth['runs']} times: "
                      f"{growth['before']} -> {growth['after_1']} after 1 run -> "
                      f"{growth['after_n']} after {growth['runs']} (max {growth['max']})")
                result("scale_state_growth_per_run",
                       f"{growth['after_n'] - growth['after_1']} bytes from run 1 to "
                       f"{growth['runs']}", "bounded: no growth after the first run",
                       growth["max"] - growth["after_1"] < 200, **growth)
    show(results)
    return 0 if report(results, args.reps, sizes[0]) else 1


if __name__ == "__main__":
    sys.exit(main())
