"""Not a goal: the same commands by two builds of loopctl, side by side in
one run, to show a change costs nothing on a command people run often.

    python bench/profiling/ab_builds.py --other /tmp/base/.venv/bin [--loops 10,1000] [--reps 15]

`--other`: the bin folder of a second venv (another checkout installed
there); this venv's loopctl is the first. Each size gets one home (a
`loops.yaml` of idle loops, driven once), copied for each build; each
repetition runs every command once per build, the builds' order swapped
every other time. Prints each build's median CPU (user+sys of the command
and what it waited for) and wall, and their ratio (this build / other).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import (  # noqa: E402
    LOOPCTL,
    Workspace,
    children_cpu,
    copy_home,
    env_for,
    loop_entry,
    median,
    reconciled,
    timed,
)

COMMANDS = {
    "ls": ("ls",),
    "ls --json": ("ls", "--json"),
    "status NAME": ("status", "idle00005"),
    "status NAME --json": ("status", "idle00005", "--json"),
    "tick (idle)": ("tick",),
    "run NAME": ("run", "idle00001"),
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--other", required=True, type=Path, help="the other build's venv bin")
    ap.add_argument("--loops", default="10,1000")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    builds = {"this": LOOPCTL, "other": str(args.other / "loopctl")}
    with Workspace("ab") as ws:
        for total in map(int, args.loops.split(",")):
            template = ws.home(f"tpl{total}")
            reconciled(template, [loop_entry(f"idle{i:05d}", ["true"], every="1h", after="1h")
                                  for i in range(total)])
            homes = {b: copy_home(template, ws.home(f"{b}{total}")) for b in builds}
            cpu = {(b, c): [] for b in builds for c in COMMANDS}
            wall = {(b, c): [] for b in builds for c in COMMANDS}
            for rep in range(args.reps):
                order = list(builds) if rep % 2 == 0 else list(builds)[::-1]
                for command, argv in COMMANDS.items():
                    for build in order:
                        before = children_cpu()
                        wall[build, command].append(
                            timed([builds[build], *argv], env_for(homes[build])))
                        cpu[build, command].append(children_cpu() - before)
            print(f"{total} loops, {args.reps} reps: median CPU ms (wall ms), this / other")
            for command in COMMANDS:
                this, other = median(cpu["this", command]), median(cpu["other", command])
                print(f"  {command:20} this {_ms(this, wall['this', command])}"
                      f"  other {_ms(other, wall['other', command])}  {this / other:5.2f}x")
            for home in homes.values():
                shutil.rmtree(home, ignore_errors=True)
    return 0


def _ms(cpu: float, walls: list[float]) -> str:
    return f"{cpu * 1000:6.1f} ({median(walls) * 1000:6.1f})"


if __name__ == "__main__":
    sys.exit(main())
