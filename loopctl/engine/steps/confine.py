"""Step: confine the agent (DESIGN §14) with the kernel's Landlock.

Decided in the supervisor, applied in the child between fork and exec
(after the bounds step has put it in the run's cgroup), inherited by every
process the agent starts. `--sandbox on` that cannot be honoured raises:
such a run must not start."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loopctl.domain.model import LoopDef
from loopctl.engine.steps.context import RunContext, one_line


def confine(ctx: RunContext, loop: LoopDef, cwd: str, env: dict[str, str],
            run: dict[str, Any], argv: list[str],
            files: list[str]) -> Callable[[], None] | None:
    """The hook that confines the agent (None: it runs unconfined). Sets
    `ctx.sandbox` to what the record says; may change `argv` in place (a
    preset whose own sandbox cannot start inside loopctl's)."""
    from loopctl.agents.presets import is_agent
    from loopctl.engine.sandbox import confined_argv, confinement_for

    own = [str(ctx.store.paths.config_dir), str(ctx.store.paths.state_dir)]
    ctx.sandbox = "unavailable"  # what the record says if the next call raises
    ctx.confinement, why = confinement_for(
        loop, is_agent(loop), run.get("sandbox_default"), cwd, env,
        str(ctx.decision_path.parent), files, own, ctx.run_id, ctx.repository)
    if ctx.confinement is not None and ctx.repository is None:
        ctx.repository = ctx.found_repository = ctx.confinement.repo
    if ctx.confinement is None:
        ctx.sandbox = why or "off"
        if why:
            ctx.log.hold(f"# loopctl: {why}")
        return None
    env.update(ctx.confinement.env())
    ctx.sandbox = f"landlock ABI {ctx.confinement.ruleset.version}"
    ctx.log.hold(f"# loopctl: {ctx.confinement.summary()}")
    changed = confined_argv(loop, argv)
    if changed != argv:  # in place: the record shows what really ran
        ctx.log.hold(f"# loopctl: confined, the agent runs {one_line(changed)}")
        argv[:] = changed
    return ctx.confinement.preexec


def recorded_repository(ctx: RunContext, st: dict[str, Any], ws: Any) -> None:
    """What the run's sandboxes may read of its repository: loopctl's
    record of the worktree it made, or the repository recorded for the
    loop (None: a loop never looked up, found at its first confined run
    and recorded then). Never a `.git` read from the agent's folder."""
    from loopctl.engine.repo_record import of_worktree

    if ws is not None:
        ctx.repository = of_worktree(ws)
    elif isinstance(st.get("repository"), list):
        ctx.repository = tuple(st["repository"])


def release(ctx: RunContext) -> None:
    """After the run: the ruleset's descriptor and the private TMPDIR."""
    if ctx.confinement is not None:
        ctx.confinement.close()
        ctx.confinement = None
