"""A command loopctl runs beside the agent (the gate `--if`, the check
`--check`): spawned inside the run's bounds (cgroup, death signal, marker) in
a session of its own, confined by `confined` when given, never through a
shell; its output drained and only the last `keep` bytes kept; killed with
its whole tree at the deadline or on `stop --kill`; and whatever it left
behind reaped before the run goes on. What its exit means is the caller's.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

from loopctl.engine import procs
from loopctl.engine import run_bounds as bounds
from loopctl.engine import run_signals as wait
from loopctl.engine.launch_support import in_child
from loopctl.engine.run_context import RunContext
from loopctl.fast.data_class import record
from loopctl.integrations import subprocess_runner as runner

LINGER = 1.0  # seconds its output is read after it exited (a child it left may hold it)


@record
class Finished:
    exit_code: int | None  # None: timed out, stopped, or could not start
    output: bytes  # its last `keep` bytes
    duration_s: float
    note: str | None = None
    started: bool = True  # False: it could not start (the note says why)
    stopped: bool = False  # a stop signal (`stop --kill`) ended it


def run(ctx: RunContext, what: str, argv: list[str], cwd: str, env: dict[str, str],
        timeout: float, confined: Callable[[], None] | None, keep: int) -> Finished:
    """Run `argv` to its end or `timeout`; `what` ("gate", "check") names it
    in the notes."""
    began = time.monotonic()
    grace = wait.kill_grace()
    try:
        job = runner.start(argv, env=env, timeout=timeout, cwd=cwd, out_limit=keep,
                           keep_tail=True, stderr="stdout", linger=LINGER,
                           preexec=in_child(bounds.child_setup(ctx), confined),
                           kill=lambda proc: procs.kill_tree(proc, grace))
    except subprocess.SubprocessError:  # only the sandbox hook raises one
        return Finished(None, b"", 0.0, f"sandbox unavailable: the kernel refused to confine "
                        f"the {what} (landlock_restrict_self)", started=False)
    except OSError as exc:
        why = "not found" if isinstance(exc, FileNotFoundError) else exc.strerror
        return Finished(None, b"", 0.0, f"{what} cannot start {argv[0]}: {why}", started=False)
    finally:
        bounds.spawned(ctx)
    try:
        ran = job.finish()
    except wait.Interrupted:
        wait.ignore_stop_signals()  # a second Ctrl-C must not leave its tree behind
        procs.kill_tree(job.proc, grace)
        bounds.reap(ctx)
        return Finished(None, b"", time.monotonic() - began, f"stopped during the {what}",
                        stopped=True)
    note = f"{what} timed out after {timeout:g}s" if ran.timed_out else None
    leftovers = bounds.reap(ctx)  # nothing it started outlives it
    if leftovers:
        left = f"killed {len(leftovers)} process(es) the {what} left"
        note = f"{note}; {left}" if note else left
    exit_code = None if ran.timed_out else ran.status
    return Finished(exit_code, ran.out, time.monotonic() - began, note)
