"""Where a run's CPU goes (the run_cpu diagnosis; not part of run_all).

CPU (os.wait4: the process and the descendants it waited for) of one run
with agent `true`, through the CLI and through loopctl's own functions
without the Typer layer, plus the import cost of the heavy modules, each
against `python -c "import subprocess; subprocess.run(['true'])"`.

    python bench/profiling/cpu_breakdown.py [--reps 9]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import (  # noqa: E402
    PY,
    Workspace,
    become_subreaper,
    copy_home,
    env_for,
    loopctl,
    median,
    wait_quiet,
)
from run_cpu import BASELINE, cpu_of, template  # noqa: E402

DIRECT_TICK = ("from loopctl.engine.firing import tick; from loopctl.storage.store import Store; "
               "from loopctl import clock; tick(Store(), clock.now(), wait={wait})")
DIRECT_RUN = ("from loopctl.commands import drivers as firing; "
              "from loopctl.storage.store import Store; "
              "firing.run_now(Store(), 'cpu')")

CASES = {
    "baseline: python -c subprocess.run(['true'])": (BASELINE, False),
    "loopctl tick --wait (driver + supervisor)": (loopctl("tick", "--wait"), True),
    "loopctl tick (driver only)": (loopctl("tick"), True),
    "firing.tick(wait=True), no Typer": ([PY, "-c", DIRECT_TICK.format(wait=True)], True),
    "firing.tick(wait=False), no Typer": ([PY, "-c", DIRECT_TICK.format(wait=False)], True),
    "loopctl run NAME": (loopctl("run", "cpu"), True),
    "firing.run_now(), no Typer": ([PY, "-c", DIRECT_RUN], True),
    "import: python -c pass": ([PY, "-c", "pass"], False),
    "import loopctl.cli.app (typer)": ([PY, "-c", "import loopctl.cli.app"], False),
    "import pydantic.TypeAdapter (typer 0.29 coercion)":
        ([PY, "-c", "from pydantic import TypeAdapter"], False),
    "import filelock": ([PY, "-c", "import filelock"], False),
    "import loopctl.engine.supervisor": ([PY, "-c", "import loopctl.engine.supervisor"], False),
    "import loopctl.engine.firing": ([PY, "-c", "import loopctl.engine.firing"], False),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args()
    res: dict[str, list[float]] = {k: [] for k in CASES}
    become_subreaper()  # the driver-only cases leave a supervisor behind: wait for it
    with Workspace("cpubreak") as ws:
        tpl = template(ws)
        for _ in range(args.reps):
            for label, (cmd, needs_home) in CASES.items():
                if not needs_home:
                    res[label].append(cpu_of(cmd))
                    continue
                home = copy_home(tpl, ws.home("rep"))
                try:
                    res[label].append(cpu_of(cmd, env_for(home)))
                    wait_quiet()
                finally:
                    shutil.rmtree(home, ignore_errors=True)
    base = median(res[next(iter(CASES))])
    print(f"CPU per command, median of {args.reps} (ratio to the baseline)")
    for label, xs in res.items():
        print(f"  {label:<52} {median(xs) * 1e3:7.1f} ms  {median(xs) / base:5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
