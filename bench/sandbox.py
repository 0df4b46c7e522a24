"""What confinement costs (issue 24, DESIGN §14).

1. Start-up of one run: `loopctl run NAME` of a `command: [true]` loop with
   `sandbox: on` vs the same loop with `sandbox: off`, interleaved, median
   of N: CPU (user+sys of the run and its agent, the goal) and wall, start
   to exit; every confined run's record must say landlock.
2. How the ruleset is applied, measured in this process: Popen(["true"])
   plain, with the preexec hook loopctl uses (prctl + landlock_restrict_self
   on a ruleset built here), and through an exec wrapper (a second
   interpreter that confines itself and execs `true`): why it is a hook.
3. 50 confined runs at once: 50 `loopctl run` processes started together,
   confined vs unconfined, wall until the last exits; every record checked.

    python bench/sandbox.py [--quick] [--n N] [--many 50]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _common import (
    PY,
    Workspace,
    children_cpu,
    env_for,
    header,
    loop_entry,
    loopctl,
    median,
    result,
    run_records,
    spread,
    timed,
    write_loops,
)

WRAPPER = ("import os, sys\n"
           "from loopctl.engine.containment import landlock\n"
           "r = landlock.Ruleset(landlock.abi())\n"
           "for p in ('/usr', '/bin', '/lib', '/lib64', '/etc', sys.base_prefix):\n"
           "    r.allow(p, landlock.READ)\n"
           "r.apply()\n"
           "os.execv(sys.argv[1], sys.argv[1:])\n")


def make_home(ws: Workspace, label: str, names: list[str], mode: str,
              top: str = "") -> tuple[Path, Path]:
    home = ws.home(label)
    work = ws.root / f"work-{label}"
    work.mkdir()
    write_loops(home, [loop_entry(n, ["true"], cwd=str(work), sandbox=mode, after="1h",
                                  keep_runs=1000) for n in names], top=top)
    return home, work


def startup(ws: Workspace, n: int) -> dict[str, list[float]]:
    """Wall and CPU (user+sys of `loopctl run` and the agent it waited for:
    steadier than wall on a loaded machine) of each run, interleaved."""
    on, _ = make_home(ws, "on", ["one"], "on")
    off, _ = make_home(ws, "off", ["one"], "off")
    out: dict[str, list[float]] = {"on": [], "off": [], "on_cpu": [], "off_cpu": []}
    for _ in range(n):
        for label, home in (("on", on), ("off", off)):
            before = children_cpu()
            out[label].append(timed(loopctl("run", "one", "--force"), env=env_for(home)))
            out[label + "_cpu"].append(children_cpu() - before)
    records = [json.loads(p.read_text()) for p in run_records(on)]
    assert records and all(r["sandbox"].startswith("landlock") for r in records), records[:1]
    return out


def hook_vs_wrapper(n: int) -> dict[str, list[float]]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from loopctl.engine.containment import landlock

    ruleset = landlock.Ruleset(landlock.abi())
    for path in ("/usr", "/bin", "/lib", "/lib64", "/etc"):
        ruleset.allow(path, landlock.READ)
    ways = {
        "plain Popen": lambda: subprocess.run(["true"], check=True),
        "preexec hook": lambda: subprocess.run(["true"], check=True, preexec_fn=ruleset.apply),
        "exec wrapper": lambda: subprocess.run([PY, "-c", WRAPPER, "/usr/bin/true"],
                                                check=True),
    }
    times: dict[str, list[float]] = {k: [] for k in ways}
    for _ in range(n):
        for name, call in ways.items():
            t0 = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - t0)
    ruleset.close()
    return times


def many_at_once(ws: Workspace, count: int, mode: str) -> float:
    names = [f"r{i:02d}" for i in range(count)]
    # No cap: under the default `max_concurrent` the runs past it would exit
    # 75 (queued), and this measures runs side by side, not the queue.
    home, _ = make_home(ws, f"many-{mode}", names, mode, top="max_concurrent: 0\n")
    env = env_for(home)
    t0 = time.perf_counter()
    procs = [subprocess.Popen(loopctl("run", name), env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE) for name in names]
    codes = [p.wait() for p in procs]
    wall = time.perf_counter() - t0
    bad = [(c, p.stderr.read().decode()[:200]) for c, p in zip(codes, procs, strict=True)
           if c != 0 and p.stderr]
    assert not bad, bad[:3]
    records = [json.loads(p.read_text()) for p in run_records(home)]
    assert len(records) == count, len(records)
    want = "landlock" if mode == "on" else "off"
    assert all(r["outcome"] == "ok" and r["sandbox"].startswith(want) for r in records)
    return wall


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--n", type=int, default=None)
    parser.add_argument("--many", type=int, default=50)
    args = parser.parse_args()
    n = args.n or (10 if args.quick else 30)
    header("sandbox: what confinement costs")
    ws = Workspace("sandbox")
    try:
        runs = startup(ws, n)
        confined, plain = runs["on"], runs["off"]
        print(f"   run, sandbox on : {spread(confined)}")
        print(f"   run, sandbox off: {spread(plain)}")
        print(f"   CPU, sandbox on : {spread(runs['on_cpu'])}")
        print(f"   CPU, sandbox off: {spread(runs['off_cpu'])}")
        ways = hook_vs_wrapper(n * 3)
        for name, xs in ways.items():
            print(f"   {name:13}: {spread(xs)}")
        many_on = many_at_once(ws, args.many, "on")
        many_off = many_at_once(ws, args.many, "off")
        print(f"   {args.many} runs at once: confined {many_on:.2f} s, unconfined {many_off:.2f} s")
    finally:
        ws.close()
    # The goal is on CPU: on a shared 2-core machine wall time mostly says
    # how busy the neighbours were; both are printed and kept.
    extra_ms = (median(runs["on_cpu"]) - median(runs["off_cpu"])) * 1e3
    wall_ms = (median(confined) - median(plain)) * 1e3
    result("sandbox_startup", f"+{extra_ms:.1f} ms of CPU per run "
           f"({median(runs['on_cpu']) * 1e3:.1f} vs {median(runs['off_cpu']) * 1e3:.1f} ms, "
           f"{n} pairs; wall {wall_ms:+.1f} ms)", "<= +20 ms of CPU", extra_ms <= 20,
           wall_on_ms=median(confined) * 1e3, wall_off_ms=median(plain) * 1e3,
           hook_ms=median(ways["preexec hook"]) * 1e3,
           wrapper_ms=median(ways["exec wrapper"]) * 1e3,
           plain_ms=median(ways["plain Popen"]) * 1e3,
           many=args.many, many_on_s=many_on, many_off_s=many_off)
    return 0 if extra_ms <= 20 else 1

if __name__ == "__main__":
    os.environ.pop("LOOPCTL_SANDBOX_ABI", None)
    sys.exit(main())
