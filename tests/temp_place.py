"""Where the suite's temporary files go: pytest's basetemp (every test's
tmp_path, LOOPCTL_HOME and HOME), the PostgreSQL clusters of tests/store,
and what the processes the tests start put in the system temp dir.

On the project's machines each new entry under /tmp (a folder, a file, a
symlink) costs ~0.9 ms of system CPU, and ~0.02 ms under /var/tmp on the same
file system (2026-12-06; something there watches /tmp). A test makes dozens:
its own folders, and every state write, run record, lock and log of the
loopctl processes it starts; a `CREATE DATABASE` copies ~300 files. Unless
TMPDIR is set, the controller times a few entries in each candidate and
points TMPDIR at the cheaper; the xdist workers and every process they start
inherit it. Not /dev/shm: a sandboxed run gets an empty one of its own
(loopctl/engine/containment/privdev.py), so a run's folder there would vanish.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

# Both world-writable and sticky: PostgreSQL, run as `nobody` under root,
# reaches its cluster there (tests/store/pg_cluster.py).
CANDIDATES = ("/tmp", "/var/tmp")
PROBES = 20  # entries per candidate: ~20 ms where they are dear, ~1 ms where not


def entry_cost(folder: str) -> float | None:
    """CPU seconds (user+sys) to make PROBES folders and PROBES files in a
    fresh folder under `folder`; None where none can be made."""
    try:
        scratch = tempfile.mkdtemp(prefix="loopctl-probe-", dir=folder)
    except OSError:
        return None
    try:
        began = time.process_time()
        for n in range(PROBES):
            os.mkdir(os.path.join(scratch, f"d{n}"))
            with open(os.path.join(scratch, f"f{n}"), "wb"):
                pass
        return time.process_time() - began
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def choose() -> str:
    """Point TMPDIR at the cheaper candidate unless the user set it; one
    line saying where the temporary files go and why."""
    if os.environ.get("TMPDIR"):
        return f"temporary files: {os.environ['TMPDIR']} (TMPDIR as set)"
    costs = {folder: cost for folder in CANDIDATES if (cost := entry_cost(folder)) is not None}
    if not costs:
        return f"temporary files: {tempfile.gettempdir()} (no candidate usable)"
    best = min(costs, key=lambda folder: costs[folder])
    os.environ["TMPDIR"] = best
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    each = ", ".join(f"{folder} {cost / (2 * PROBES) * 1000:.3f} ms"
                     for folder, cost in costs.items())
    return f"temporary files: {best} (CPU per new entry: {each})"


def shared_root() -> str:
    """The folder for files another user must reach (a cluster run as
    `nobody`): the chosen candidate, else /tmp."""
    chosen = os.environ.get("TMPDIR", "")
    return chosen if chosen in CANDIDATES else "/tmp"
