"""Step 3: wait for the agent, within its timeout; leave nothing of it behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

from loopctl import clock
from loopctl.domain.model import LoopDef
from loopctl.domain.state import RunResult
from loopctl.engine import procs
from loopctl.engine import run_bounds as bounds
from loopctl.engine.run_context import RunContext
from loopctl.engine.run_signals import Interrupted, ignore_stop_signals, kill_grace


def wait(ctx: RunContext, proc: subprocess.Popen[bytes], loop: LoopDef,
         started: float) -> RunResult:
    timeout = loop.timeout
    tee = start_tee(ctx, proc, envelope_at_end(loop)) if ctx.foreground else None
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


# Presets whose output is one JSON envelope written as the run ends: `run`
# prints its result text then (`loopctl run`'s caller), not the envelope.
ENVELOPE_AT_END = frozenset({"claude", "gemini", "qwen", "cursor", "goose"})


def envelope_at_end(loop: LoopDef) -> bool:
    return not loop.command and (loop.agent or "shell") in ENVELOPE_AT_END


def start_tee(ctx: RunContext, proc: subprocess.Popen[bytes],
              log_only: bool = False) -> threading.Thread:
    """`loopctl run` in a terminal: the output to the (capped) log and to
    the screen (only to the log with `log_only`: an agent's JSON envelope)."""
    assert proc.stdout is not None
    source = proc.stdout.fileno()
    terminal = sys.stdout.fileno()

    def copy() -> None:
        while chunk := os.read(source, 65536):
            bounds.tee_write(ctx, chunk)
            try:
                if not log_only:
                    os.write(terminal, chunk)
            except OSError:
                pass

    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    return thread
