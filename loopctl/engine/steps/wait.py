"""Step 3: wait for the agent, within its timeout; leave nothing of it behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import Any

from loopctl import clock
from loopctl.domain.model import LoopDef
from loopctl.domain.state import RunResult
from loopctl.engine import procs
from loopctl.engine.steps import bounds
from loopctl.engine.steps.context import RunContext

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_interrupted(signum: int, _frame: Any) -> None:
    raise Interrupted(signum)


def interruptible() -> None:
    """SIGTERM, SIGINT and SIGHUP end the wait (and the run) as `killed`."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _raise_interrupted)


def ignore_stop_signals() -> None:
    """From here on the work is finished, not abandoned: a second Ctrl-C must
    not leave the agent's tree behind or a half-made commit or push."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def kill_grace() -> float:
    from loopctl.settings import knob

    return knob("LOOPCTL_KILL_GRACE")


def wait(ctx: RunContext, proc: subprocess.Popen[bytes], loop: LoopDef,
         started: float) -> RunResult:
    timeout = loop.timeout
    tee = start_tee(ctx, proc) if ctx.foreground else None
    bounds.watch_log(ctx, loop)
    outcome = note = None
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        outcome, note = "timeout", f"timed out after {timeout}s"
        kill(proc)
    except Interrupted as exc:
        outcome, note = "killed", f"stopped by signal {signal.Signals(exc.signum).name}"
        kill(proc)
    leftovers = procs.descendants()
    if leftovers:
        procs.kill_tree(None, min(kill_grace(), 2.0))
    # The polite round above works from snapshots; this one loops until
    # nothing the run started is left (forkers, TERM-ignorers, setsid).
    killed = len({p.pid for p in leftovers} | bounds.reap(ctx))
    if killed:
        note = (note + "; " if note else "") + f"killed {killed} leftover process(es)"
    if tee:
        tee.join(timeout=5)
    bounds.drained(ctx)
    code = proc.returncode
    exit_code = code if code >= 0 else 128 - code
    if outcome is None:
        outcome = "ok" if code == 0 else "failed"
    return RunResult(outcome, exit_code, started, clock.now(), note=note)


def kill(proc: subprocess.Popen[bytes]) -> None:
    ignore_stop_signals()
    procs.kill_tree(proc, kill_grace())


def start_tee(ctx: RunContext, proc: subprocess.Popen[bytes]) -> threading.Thread:
    """`loopctl run` in a terminal: the output to the (capped) log and to the screen."""
    assert proc.stdout is not None
    source = proc.stdout.fileno()
    terminal = sys.stdout.fileno()

    def copy() -> None:
        while chunk := os.read(source, 65536):
            bounds.tee_write(ctx, chunk)
            try:
                os.write(terminal, chunk)
            except OSError:
                pass

    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    return thread
