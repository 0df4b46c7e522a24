"""Experiment behind the concurrent_ticks diagnosis (not part of run_all).

Runs the concurrent_ticks scenario (1 tick and 50 ticks over 100 due loops)
twice: as loopctl is, and with `Store.lock` swapped, via a throwaway
`sitecustomize` on PYTHONPATH (loopctl's files are not touched), for a
blocking `fcntl.flock` instead of filelock's 5 ms polling. Prints wall time
of the ticks, time until all runs settled, CPU of everything, and non-zero
tick exits.

    python bench/profiling/lock_experiment.py [--reps 2]
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import (  # noqa: E402
    Workspace,
    become_subreaper,
    children_cpu,
    copy_home,
    env_for,
    loopctl,
    median,
    run_records,
    wait_quiet,
)
from concurrent_ticks import LOOPS, template  # noqa: E402

PATCH = '''
import os, sys
if os.environ.get("LOOPCTL_HOME"):
    import importlib.abc, importlib.util

    def _patch(mod):
        import fcntl
        from contextlib import contextmanager
        from loopctl.storage import paths as _p

        @contextmanager
        def lock(self, timeout=60.0):
            _p.ensure_dir(self.paths.state_dir)
            fd = os.open(self.paths.store_lock, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
        mod.Store.lock = lock

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "loopctl.storage.store":
                return None
            sys.meta_path.remove(self)
            try:
                spec = importlib.util.find_spec(name)
            finally:
                sys.meta_path.insert(0, self)
            run = spec.loader.exec_module
            def exec_module(module):
                run(module)
                _patch(module)
            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, Finder())
'''


def scenario(ws: Workspace, tpl: Path, ticks: int, extra: dict[str, str]) -> tuple:
    home = copy_home(tpl, ws.home("x"))
    env = env_for(home, **extra)
    cpu0 = children_cpu()
    t0 = time.perf_counter()
    procs = [subprocess.Popen(loopctl("tick"), env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for _ in range(ticks)]
    codes = [p.wait() for p in procs]
    wall = time.perf_counter() - t0
    wait_quiet(300)
    settled = time.perf_counter() - t0
    cpu = children_cpu() - cpu0
    runs = len(run_records(home))
    return wall, settled, cpu, sum(c != 0 for c in codes), runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    become_subreaper()
    with Workspace("lockexp") as ws:
        patch_dir = ws.root / "patch"
        patch_dir.mkdir()
        (patch_dir / "sitecustomize.py").write_text(PATCH)
        tpl = template(ws)
        variants = {"as is (filelock, 5 ms poll)": {},
                    "blocking flock (experiment)": {"PYTHONPATH": str(patch_dir)}}
        rows = collections.defaultdict(list)
        for _ in range(args.reps):
            for label, extra in variants.items():
                for n in (1, 50):
                    rows[(label, n)].append(scenario(ws, tpl, n, extra))
                    time.sleep(1)
    print(f"{LOOPS} due loops, {os.cpu_count()} CPUs, median of {args.reps}")
    print(f"{'variant':<30} {'ticks':>5} {'wall s':>7} {'settled s':>9} {'CPU s':>6} "
          f"{'exit!=0':>7} {'runs':>5}")
    for label in variants:
        walls = {}
        for n in (1, 50):
            data = rows[(label, n)]
            walls[n] = median([d[0] for d in data])
            print(f"{label:<30} {n:>5} {walls[n]:>7.2f} {median([d[1] for d in data]):>9.2f} "
                  f"{median([d[2] for d in data]):>6.1f} {sum(d[3] for d in data):>7} "
                  f"{min(d[4] for d in data):>5}")
        print(f"{'':<30} ratio 50/1: {walls[50] / walls[1]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
