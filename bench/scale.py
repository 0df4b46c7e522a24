"""`tick` and `ls` with 1,000 loops defined (10 due) vs the same with 10 loops
(10 due).

Goal (issue 7): <= 3x for each command.

Two template homes are built once: `loops.yaml` written directly (990 loops
first due in an hour + 10 loops due a few seconds after creation; and just
the 10), reconciled by one `loopctl tick` while nothing is due yet, then left
until the 10 are due. Each repetition copies a template (and re-points
state's loops.yaml signature at the copy, so the copy is exactly the home the
previous cron tick left), times `loopctl ls`, then `loopctl tick` (which fires
the 10 due loops and returns without waiting for them), then waits for the
10 supervisors to finish before the next repetition. Small and large
alternate; medians compared.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from _common import (
    Workspace,
    become_subreaper,
    check,
    copy_home,
    env_for,
    header,
    loop_entry,
    loopctl,
    median,
    result,
    run_records,
    spread,
    timed,
    wait_quiet,
    write_loops,
)

DUE = 10


def template(ws: Workspace, total: int) -> Path:
    home = ws.home(f"template{total}")
    entries = [loop_entry(f"due{i:02d}", ["true"], every="1h", after="2s") for i in range(DUE)]
    entries += [loop_entry(f"idle{i:04d}", ["true"], every="1h", after="1h")
                for i in range(total - DUE)]
    write_loops(home, entries)
    out = json.loads(check(loopctl("tick", "--json"), env_for(home)))
    assert not out["fired"], f"template fired {out['fired']}"
    return home


def wait_due(home: Path) -> None:
    state = json.loads((home / "state" / "state.json").read_text())
    wake = state["wake_at"]
    while time.time() <= wake + 0.05:
        time.sleep(0.05)


def one(ws: Workspace, tpl: Path) -> tuple[float, float]:
    home = copy_home(tpl, ws.home("rep"))
    env = env_for(home)
    try:
        t_ls = timed(loopctl("ls"), env)
        t_tick = timed(loopctl("tick"), env)
        wait_quiet()
        n = len(run_records(home))
        if n != DUE:
            raise RuntimeError(f"expected {DUE} runs, found {n} in {home}")
        return t_tick, t_ls
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="5 repetitions instead of 9")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--loops", type=int, default=1000)
    args = ap.parse_args()
    reps = 5 if args.quick else args.reps
    become_subreaper()
    header(f"scale: tick and ls with {args.loops} loops ({DUE} due)  vs  {DUE} loops ({DUE} due)")
    with Workspace("scale") as ws:
        small, large = template(ws, DUE), template(ws, args.loops)
        wait_due(small)
        wait_due(large)
        one(ws, small)  # warm-up
        one(ws, large)
        ticks = {"small": [], "large": []}  # type: dict[str, list[float]]
        lss = {"small": [], "large": []}  # type: dict[str, list[float]]
        for _ in range(reps):
            for key, tpl in (("small", small), ("large", large)):
                t_tick, t_ls = one(ws, tpl)
                ticks[key].append(t_tick)
                lss[key].append(t_ls)
    for what, data in (("tick", ticks), ("ls", lss)):
        print(f"   {what:>4} {DUE:>5} loops: {spread(data['small'])}")
        print(f"   {what:>4} {args.loops:>5} loops: {spread(data['large'])}")
    r_tick = median(ticks["large"]) / median(ticks["small"])
    r_ls = median(lss["large"]) / median(lss["small"])
    result("scale_tick", f"{r_tick:.2f}x wall", "<= 3x", r_tick <= 3, ratio=r_tick,
           subject_ms=median(ticks["large"]) * 1e3, baseline_ms=median(ticks["small"]) * 1e3,
           reps=reps, command=f"loopctl tick ({args.loops} loops, {DUE} due) vs ({DUE} loops)")
    result("scale_ls", f"{r_ls:.2f}x wall", "<= 3x", r_ls <= 3, ratio=r_ls,
           subject_ms=median(lss["large"]) * 1e3, baseline_ms=median(lss["small"]) * 1e3,
           reps=reps, command=f"loopctl ls ({args.loops} loops, {DUE} due) vs ({DUE} loops)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
