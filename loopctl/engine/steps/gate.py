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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from loopctl import clock
from loopctl.domain.errors import LoopctlError
from loopctl.domain.gates import GATE_TAIL, gate_outcome, tail_text
from loopctl.domain.model import LoopDef, parse_loop
from loopctl.domain.plain import record
from loopctl.domain.state import RunResult
from loopctl.engine.steps import bounds, confine, launch, side_command
from loopctl.engine.steps.context import RunContext

if TYPE_CHECKING:
    from loopctl.integrations.workspace import Workspace

@record
class Gate:
    argv: list[str]
    exit_code: int | None
    outcome: str | None  # None: it passed, the agent runs
    output: str  # the last GATE_TAIL bytes, as text
    duration_s: float
    note: str | None = None

    def record(self) -> dict[str, Any]:
        return {"exit_code": self.exit_code, "output_tail": self.output}


def gate(ctx: RunContext, ws: Workspace | None, gated: bool | None = None) -> Gate | None:
    """Run the loop's gate, if it has one; None when it has none (or the run
    is no longer ours: launching says why). `gated` is what the driver knew
    (False: no second read of the state for the common case)."""
    if gated is False:
        return None
    claimed = _claimed(ctx)
    if claimed is None:
        return None
    loop, run, st = claimed
    if loop.gate is None or loop.worktree and ws is None:
        return None
    confine.recorded_repository(ctx, st, ws)
    bounds.hold(ctx, loop)
    cwd = ws.cwd if ws else os.path.expanduser(loop.cwd)
    # The agent's environment, $LOOPCTL_TRIGGER_FILE included.
    env = launch.agent_env(ctx, loop, cwd, run)
    argv = list(loop.gate)
    try:
        # Confined like the agent (DESIGN §14): its own TMPDIR, released
        # before the agent gets a confinement of its own.
        confined = confine.confine(ctx, loop, cwd, env, run, argv, [])
    except LoopctlError as exc:  # `--sandbox on` where it cannot be honoured
        result = Gate(argv, None, "gate_error", "", 0.0, exc.message)
    else:
        try:
            result = _run(ctx, argv, cwd, env, loop.gate_timeout, confined)
        finally:
            confine.release(ctx)
    ctx.gate = result
    _log(ctx, result)
    return result


def _claimed(ctx: RunContext) -> tuple[LoopDef, dict[str, Any], dict[str, Any]] | None:
    # Under the lock: the driver that forked us writes the claim before it
    # lets go. Launching checks the claim again before the agent starts.
    with ctx.store.lock():
        st = ctx.store.read_state()["loops"].get(ctx.name) or {}
    run = st.get("run") or {}
    if run.get("run_id") != ctx.run_id or not isinstance(run.get("spec"), dict):
        return None
    return parse_loop(ctx.name, run["spec"]), run, st


def _run(ctx: RunContext, argv: list[str], cwd: str, env: dict[str, str],
         timeout: float, confined: Callable[[], None] | None) -> Gate:
    done = side_command.run(ctx, "gate", argv, cwd, env, timeout, confined, GATE_TAIL * 2)
    if not done.started:
        return Gate(argv, None, "gate_error", "", 0.0, done.note)
    if done.stopped:
        return Gate(argv, None, "killed", "", done.duration_s, done.note)
    outcome = gate_outcome(done.exit_code, done.exit_code is None)
    note = done.note
    if outcome == "gate_error" and note is None:
        note = f"gate exited {done.exit_code}: expected 0 (work) or 1 (nothing to do)"
    return Gate(argv, done.exit_code, outcome, tail_text(done.output), done.duration_s, note)


def _log(ctx: RunContext, result: Gate) -> None:
    """After a `# loopctl: gate` line, the output kept; held with loopctl's
    other lines so the agent's output starts the log."""
    status = f"exit code {result.exit_code}" if result.exit_code is not None else "no exit code"
    shown = launch.one_line(result.argv)
    ctx.log.hold(f"# loopctl: gate {shown}: {status} after {result.duration_s:.1f}s"
                 + (f" ({result.note})" if result.note else "")
                 + (f"; its last {GATE_TAIL // 1024} KiB of output:" if result.output else ""))
    if result.output:
        ctx.log.hold(result.output.rstrip("\n"))


def blocked(ctx: RunContext) -> bool:
    """The gate ran and the agent must not."""
    return ctx.gate is not None and ctx.gate.outcome is not None


def outcome(ctx: RunContext, started: float) -> RunResult:
    """The run's result when the gate stopped it."""
    assert ctx.gate is not None and ctx.gate.outcome is not None
    return RunResult(ctx.gate.outcome, ctx.gate.exit_code, started, clock.now(),
                     note=ctx.gate.note)
