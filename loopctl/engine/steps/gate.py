"""Step 1b: the gate (`--if CMD`, DESIGN §17), before the agent is launched.

The gate runs as the agent would: in the loop's cwd (or its worktree), with
the loop's env and the run's variables, in a session of its own, inside the
run's bounds (cgroup, death signal, marker), never through a shell. It is
bounded in time (`--if-timeout`) and in what is kept of its output (the
last 8 KiB: a gate that floods is drained, not stored). Exit 0: the agent
runs with that output in its envelope as data; exit 1: no agent, the fire
is `skipped`; anything else, a timeout or a gate that cannot start:
`gate_error`.
"""

from __future__ import annotations

import os

from loopctl import clock
from loopctl.domain.errors import LoopctlError
from loopctl.domain.gates import GATE_TAIL, gate_outcome, tail_text
from loopctl.domain.state import RunResult
from loopctl.engine import side_command
from loopctl.engine.containment import confining
from loopctl.engine.containment.confining import Confined
from loopctl.engine.launch_support import agent_env
from loopctl.engine.run_context import Claim, Gate, Prepared, RunContext, one_line


def gate(ctx: RunContext, claim: Claim, prepared: Prepared) -> Gate | None:
    """Run the loop's gate, if it has one (and its worktree was made)."""
    loop, ws = claim.loop, prepared.ws
    if loop.gate is None or loop.worktree and ws is None:
        return None
    confining.recorded_repository(ctx, claim.state, ws)
    cwd = ws.cwd if ws else os.path.expanduser(loop.cwd)
    # The agent's environment, $LOOPCTL_TRIGGER_FILE included.
    env = agent_env(ctx, loop, cwd, claim.run)
    argv = list(loop.gate)
    try:
        # Confined like the agent (DESIGN §14): its own TMPDIR, released
        # before the agent gets a confinement of its own.
        confined = confining.confine(ctx, loop, cwd, env, claim.run, argv, [])
    except LoopctlError as exc:  # `--sandbox on` where it cannot be honoured
        result = Gate(argv, None, "gate_error", "", 0.0, exc.message, "unavailable")
    else:
        try:
            result = _run(ctx, argv, cwd, env, loop.gate_timeout, confined)
        finally:
            confined.release()
    _log(ctx, result)
    return result


def _run(ctx: RunContext, argv: list[str], cwd: str, env: dict[str, str],
         timeout: float, confined: Confined) -> Gate:
    done = side_command.run(ctx, "gate", argv, cwd, env, timeout, confined.hook,
                            GATE_TAIL * 2)
    if not done.started:
        return Gate(argv, None, "gate_error", "", 0.0, done.note, confined.sandbox)
    if done.stopped:
        return Gate(argv, None, "killed", "", done.duration_s, done.note, confined.sandbox)
    outcome = gate_outcome(done.exit_code, done.exit_code is None)
    note = done.note
    if outcome == "gate_error" and note is None:
        note = f"gate exited {done.exit_code}: expected 0 (work) or 1 (nothing to do)"
    return Gate(argv, done.exit_code, outcome, tail_text(done.output), done.duration_s, note,
                confined.sandbox)


def _log(ctx: RunContext, result: Gate) -> None:
    """After a `# loopctl: gate` line, the output kept; held with loopctl's
    other lines so the agent's output starts the log."""
    status = f"exit code {result.exit_code}" if result.exit_code is not None else "no exit code"
    shown = one_line(result.argv)
    ctx.log.hold(f"# loopctl: gate {shown}: {status} after {result.duration_s:.1f}s"
                 + (f" ({result.note})" if result.note else "")
                 + (f"; its last {GATE_TAIL // 1024} KiB of output:" if result.output else ""))
    if result.output:
        ctx.log.hold(result.output.rstrip("\n"))


def outcome(gate: Gate, started: float) -> RunResult:
    """The run's result when the gate stopped it."""
    return RunResult(gate.outcome or "gate_error", gate.exit_code, started, clock.now(),
                     note=gate.note)
