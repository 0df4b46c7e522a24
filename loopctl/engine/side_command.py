"""A command loopctl runs beside the agent (the gate `--if`, the check
`--check`): spawned inside the run's bounds (cgroup, death signal, marker) in
a session of its own, confined by `confined` when given, never through a
shell; its output drained and only the last `keep` bytes kept; killed with
its whole tree at the deadline or on `stop --kill`; and whatever it left
behind reaped before the run goes on. What its exit means is the caller's.
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from collections.abc import Callable

from loopctl.domain.plain import record
from loopctl.engine import procs
from loopctl.engine import run_bounds as bounds
from loopctl.engine import run_signals as wait
from loopctl.engine.launch_support import in_child
from loopctl.engine.run_context import RunContext

READ_SLICE = 0.2  # how often a silent command is checked for having exited
# Bytes read after it exited before giving up on a child holding the pipe.
DRAIN_LIMIT = 1 << 20


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
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True,
                                preexec_fn=in_child(bounds.child_setup(ctx), confined))
    except subprocess.SubprocessError:  # only the sandbox hook raises one
        return Finished(None, b"", 0.0, f"sandbox unavailable: the kernel refused to confine "
                        f"the {what} (landlock_restrict_self)", started=False)
    except OSError as exc:
        why = "not found" if isinstance(exc, FileNotFoundError) else exc.strerror
        return Finished(None, b"", 0.0, f"{what} cannot start {argv[0]}: {why}", started=False)
    finally:
        bounds.spawned(ctx)
    assert proc.stdout is not None
    try:
        output, timed_out = drain(proc, began + timeout, keep)
        if not timed_out:  # its output ended (EOF); it may still be running
            proc.wait(timeout=max(began + timeout - time.monotonic(), 0.01))
    except subprocess.TimeoutExpired:
        timed_out = True
    except wait.Interrupted:
        wait.ignore_stop_signals()  # a second Ctrl-C must not leave its tree behind
        procs.kill_tree(proc, wait.kill_grace())
        bounds.reap(ctx)
        proc.stdout.close()
        return Finished(None, b"", time.monotonic() - began, f"stopped during the {what}",
                        stopped=True)
    note = None
    if timed_out:
        note = f"{what} timed out after {timeout:g}s"
        procs.kill_tree(proc, wait.kill_grace())
    code = proc.wait()  # before reaping the rest: its own exit status is the answer
    leftovers = bounds.reap(ctx)  # nothing it started outlives it
    if leftovers:
        left = f"killed {len(leftovers)} process(es) the {what} left"
        note = f"{note}; {left}" if note else left
    proc.stdout.close()
    exit_code = None if timed_out else (code if code >= 0 else 128 - code)
    return Finished(exit_code, output, time.monotonic() - began, note)


def drain(proc: subprocess.Popen[bytes], deadline: float, keep: int) -> tuple[bytes, bool]:
    """Read its output until it exits (and its pipe runs dry) or the
    deadline; keep only the last `keep` bytes. True with it when the
    deadline came first."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    tail = b""
    exited_at: float | None = None
    after_exit = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return tail, proc.poll() is None
        ready, _, _ = select.select([fd], [], [], min(left, READ_SLICE))
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                return tail, False
            tail = (tail + chunk)[-keep:]
            if exited_at is not None:
                after_exit += len(chunk)
        if exited_at is None and proc.poll() is not None:
            exited_at = time.monotonic()
        # Exited, but a child it left holds the pipe open: stop reading soon.
        if exited_at is not None and (not ready or after_exit > DRAIN_LIMIT
                                      or time.monotonic() - exited_at > 1.0):
            return tail, False
