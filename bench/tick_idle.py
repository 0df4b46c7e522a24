"""`loopctl tick` with 20 loops defined, none due, vs `python3 -c pass`.

Goal (issue 7: 3x; speed round 4: 1.5x): <= 1.5x wall time, and neither `loopctl --help` machinery
(typer/click) nor agent code on that path.

The home holds 20 loops whose first run is an hour away; one tick first
reconciles state (as the previous cron tick would have). Then the console
script (`loopctl tick`, as cron runs it) and `python -c pass` (same
interpreter) alternate, REPS times each after a warm-up; medians compared.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from _common import (
    PY,
    Workspace,
    env_for,
    header,
    loop_entry,
    loopctl,
    median,
    reconciled,
    result,
    spread,
    timed,
)


def importtime(env: dict[str, str]) -> tuple[list[str], list[tuple[int, str]]]:
    """Modules imported by `loopctl tick` (console script) and the 12 costliest."""
    proc = subprocess.run([PY, "-X", "importtime", loopctl()[0], "tick"], env=env,
                          capture_output=True, text=True)
    mods, costs = [], []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _self_us, cum_us, name = line[len("import time:"):].split("|", 2)
        mods.append(name.strip())
        costs.append((int(cum_us), name.rstrip()))
    costs.sort(reverse=True)
    return mods, costs[:12]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (15)")
    args = ap.parse_args()
    reps = 15 if args.quick else args.reps
    header("tick_idle: `loopctl tick`, 20 loops, none due  vs  `python -c pass`")
    with Workspace("tick_idle") as ws:
        home = ws.home()
        # Reconciled: state now says "nothing due".
        reconciled(home, [loop_entry(f"loop{i:02d}", ["true"], every="1h", after="1h")
                          for i in range(20)])
        env = env_for(home)
        subject_cmd, base_cmd = loopctl("tick"), [PY, "-c", "pass"]
        for _ in range(3):  # warm-up: page cache, pyc files
            timed(subject_cmd, env)
            timed(base_cmd, env)
        subject, base = [], []
        for _ in range(reps):
            base.append(timed(base_cmd, env))
            subject.append(timed(subject_cmd, env))
        ratio = median(subject) / median(base)
        print(f"   python -c pass : {spread(base)}")
        print(f"   loopctl tick   : {spread(subject)}")
        mods, top = importtime(env)
        heavy = [m for m in ("typer", "click", "rich", "yaml", "croniter", "filelock", "psutil",
                             "loopctl.cli.app", "loopctl.agents.presets", "loopctl.storage.store",
                             "loopctl.domain.model")
                 if m in mods]
        lc = [m for m in mods if m.startswith("loopctl")]
        print(f"   modules imported by `loopctl tick`: {len(mods)}; loopctl modules: "
              f"{', '.join(lc) or '-'}")
        print(f"   heavy modules on the path: {', '.join(heavy) or 'none'}")
        print("   costliest imports (cumulative us):")
        for us, name in top[:8]:
            print(f"     {us:>8}  {name.strip()}")
        typer_on_path = "typer" in mods
        print(f"   typer imported on the idle tick path: {'YES' if typer_on_path else 'no'}")
        met = ratio <= 1.5 and not typer_on_path
        result("tick_idle", f"{ratio:.2f}x wall", "<= 1.5x, no typer", met, ratio=ratio,
               subject_ms=median(subject) * 1e3, baseline_ms=median(base) * 1e3,
               typer_imported=typer_on_path, reps=reps,
               command=f"{loopctl('tick')[0]} tick  vs  {PY} -c pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
