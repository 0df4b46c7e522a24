"""loopctl with many loops defined vs with a handful (issue 7: 1,000;
issue 15: `--loops 10000`).

Goals (each <= 3x of the same command on the small home):
- `tick` with none due (what cron runs every minute),
- `ls` (the whole table),
- `start` of one more loop (the 10,001st vs the 11th).
Also reported, without a goal: `tick` with 10 loops due (a full driver pass
that fires them) and `ls --json`.

Templates are built once: `loops.yaml` written directly (N-10 loops first
due in an hour + 10 due a few seconds after creation; and the small home
with the 10 alone), reconciled by one `loopctl tick` while nothing is due
(which also leaves the parsed-definitions cache a real home has). "None due"
copies the template before its 10 are due; "10 due" waits until they are.
Each repetition copies a template (bench/_common.copy_home re-points the
state's and the summary's file signatures at the copy, so the copy is exactly
the home the previous cron tick left), runs the command, and (for a firing
tick) waits for the supervisors. Small and large alternate; medians compared.
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
DUE_AFTER = 20.0  # seconds: the "none due" measurements finish before this


def template(ws: Workspace, total: int) -> Path:
    home = ws.home(f"template{total}")
    entries = [loop_entry(f"due{i:02d}", ["true"], every="1h", after=f"{DUE_AFTER:g}s")
               for i in range(DUE)]
    entries += [loop_entry(f"idle{i:05d}", ["true"], every="1h", after="1h")
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


def measure(ws: Workspace, tpl: Path, what: str) -> float:
    home = copy_home(tpl, ws.home("rep"))
    env = env_for(home)
    try:
        if what == "tick_none_due":
            return timed(loopctl("tick"), env)
        if what == "ls":
            return timed(loopctl("ls"), env)
        if what == "ls_json":
            return timed(loopctl("ls", "--json"), env)
        if what == "start":
            return timed(loopctl("start", "--every", "1h", "--after", "1h", "--name",
                                 "one-more", "--command", "true", "bench"), env)
        took = timed(loopctl("tick"), env)  # tick_10_due
        wait_quiet()
        n = len(run_records(home))
        if n != DUE:
            raise RuntimeError(f"expected {DUE} runs, found {n} in {home}")
        return took
    finally:
        shutil.rmtree(home, ignore_errors=True)


def compare(ws: Workspace, small: Path, large: Path, what: str, reps: int) -> dict[str, list]:
    measure(ws, small, what)  # warm-up (page cache, pyc)
    measure(ws, large, what)
    times: dict[str, list[float]] = {"small": [], "large": []}
    for _ in range(reps):
        for key, tpl in (("small", small), ("large", large)):
            times[key].append(measure(ws, tpl, what))
    return times


GOALS = {"tick_none_due": "loopctl tick (none due)", "ls": "loopctl ls",
         "start": "loopctl start (one more loop)"}
INFO = {"ls_json": "loopctl ls --json", "tick_10_due": f"loopctl tick ({DUE} due, fires them)"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="5 repetitions instead of 9")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--loops", type=int, default=1000)
    args = ap.parse_args()
    reps = 5 if args.quick else args.reps
    become_subreaper()
    header(f"scale: {args.loops} loops vs {DUE} loops")
    results = {}
    with Workspace("scale") as ws:
        large, small = template(ws, args.loops), template(ws, DUE)
        # First, while none of the 10 is due yet (DUE_AFTER after `small`).
        for what in ("tick_none_due", "ls", "start", "ls_json"):
            results[what] = compare(ws, small, large, what, reps)
        wait_due(small)
        wait_due(large)
        results["tick_10_due"] = compare(ws, small, large, "tick_10_due", reps)
    for what, data in results.items():
        label = GOALS.get(what) or INFO[what]
        print(f"   {label}")
        print(f"      {DUE:>6} loops: {spread(data['small'])}")
        print(f"      {args.loops:>6} loops: {spread(data['large'])}")
    for what, data in results.items():
        ratio = median(data["large"]) / median(data["small"])
        goal = what in GOALS
        result(f"scale_{what}", f"{ratio:.2f}x wall", "<= 3x" if goal else "none (reported)",
               ratio <= 3 or not goal, ratio=ratio, subject_ms=median(data["large"]) * 1e3,
               baseline_ms=median(data["small"]) * 1e3, reps=reps,
               command=f"{GOALS.get(what) or INFO[what]}: {args.loops} loops vs {DUE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
