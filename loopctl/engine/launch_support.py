"""What the steps that start a command (the gate, the agent, the check)
share: the claim read once, the agent's environment, the `loopctl` shim,
the hooks run between fork and exec."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from loopctl.domain.checks import shell_quote
from loopctl.domain.errors import LoopctlError
from loopctl.domain.model import LoopDef, parse_loop
from loopctl.domain.state import LoopState
from loopctl.engine import reaper
from loopctl.engine import run_bounds as bounds
from loopctl.engine.run_context import Claim, RunContext

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any


def read_claim(ctx: RunContext) -> Claim:
    """Under the store lock, once per run: the run must be ours; its bounds
    are held from here on. Raises when it is not ours (not starting)."""
    with ctx.store.lock():
        st = ctx.store.read_state()["loops"].get(ctx.name)
        run = ours(ctx, st)
        assert st is not None
        loop = parse_loop(ctx.name, run["spec"])
        bounds.hold(ctx, loop)
    return Claim(loop, run, st)


def ours(ctx: RunContext, st: LoopState | None) -> dict[str, Any]:
    run = st and st.run
    if not run or run.get("run_id") != ctx.run_id or not isinstance(run.get("spec"), dict):
        raise LoopctlError(f"run {ctx.run_id} of {ctx.name} is not claimed; not starting")
    if not ctx.foreground and (run.get("supervisor") or {}).get("pid") != os.getpid():
        raise LoopctlError(f"run {ctx.run_id} belongs to another supervisor")
    return run


def agent_env(ctx: RunContext, loop: LoopDef, cwd: str, run: dict[str, Any]) -> dict[str, str]:
    env = dict(os.environ)
    if not loop.command:  # a --command loop has no preset defaults
        from loopctl.agents.presets import env_for

        env.update(env_for(loop))
    env.update({k: v for k, v in loop.env.items() if v is not None})
    env.update(LOOPCTL_LOOP=ctx.name, LOOPCTL_RUN_ID=ctx.run_id,
               LOOPCTL_ITERATION=str(run["iteration"]),
               LOOPCTL_DECISION_FILE=str(ctx.decision_path))
    payload = trigger_payload(ctx)
    env.pop("LOOPCTL_TRIGGER_FILE", None)  # only ever the run's own payload
    if payload:
        env["LOOPCTL_TRIGGER_FILE"] = str(payload[0])
    answer = run_answer(ctx)
    env.pop("LOOPCTL_ANSWER_FILE", None)
    if answer:
        env["LOOPCTL_ANSWER_FILE"] = str(answer[0])
    # How the next driver finds what a SIGKILLed supervisor left (reaper).
    env[reaper.MARK_VAR] = ctx.bounds.held.mark
    # Node CLIs (opencode among them) take their project from $PWD when
    # it is set; the driver's own $PWD would send the agent elsewhere.
    env["PWD"] = os.path.abspath(cwd)
    # The agent's `loopctl decide` must reach this installation, whatever
    # else is on its PATH: a one-file shim directory goes first.
    env["PATH"] = os.pathsep.join([str(shim_dir(ctx)), env.get("PATH", os.defpath)])
    return env


def trigger_payload(ctx: RunContext) -> tuple[Path, str] | None:
    """The payload of the trigger this run answers (DESIGN §17), if any."""
    from loopctl.storage.triggers import run_payload

    return run_payload(ctx.store.paths, ctx.name, ctx.run_id)


def in_child(*hooks: Callable[[], None] | None) -> Callable[[], None]:
    """Between fork and exec, in order: the bounds (the cgroup must be
    joined while its files can still be written), then the sandbox."""
    steps = [hook for hook in hooks if hook is not None]

    def run_all() -> None:
        for hook in steps:
            hook()

    return run_all


def shim_dir(ctx: RunContext) -> Path:
    # Not `-m loopctl`: that would import a `loopctl/` folder from the
    # agent's working directory first. `-c` starts sys.path with it too,
    # so the first entry is dropped before loopctl is imported.
    body = (f"#!/bin/sh\nexec {shell_quote(sys.executable)} -c "
            "'import sys; del sys.path[0]; from loopctl.entry import main; main()' "
            '"$@"\n')
    from loopctl.storage.run_files import install_shim

    return install_shim(ctx.store.paths, body)


def run_answer(ctx: RunContext) -> tuple[Path, str] | None:
    """A person's answer to the block this run follows (DESIGN §19), if any."""
    from loopctl.storage.triggers import run_answer as read_answer

    return read_answer(ctx.store.paths, ctx.name, ctx.run_id)
