"""What a run imports, checked in a fresh interpreter: the modules a
driver and its supervisor load (the drivers, the lease, the supervisor's
preload), then a few calls of the test's own."""

from __future__ import annotations

import subprocess
import sys

RUN_PATH = ("import sys\nimport loopctl.cli.direct, loopctl.engine.firing, loopctl.storage.lease\n"
            "import loopctl.engine.supervisor as s\ns.preload()\n")


def loaded_after_the_run_path(then: str, modules: list[str]) -> list[str]:
    """For each of `modules`, "True" or "False": imported once the run path
    and `then` (lines of Python) ran."""
    code = RUN_PATH + then + f"print(*[m in sys.modules for m in {modules!r}])"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()
