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
        str(ctx.decision_path.parent), [*files, *given(ctx)], own, ctx.run_id,
        ctx.repository)
    if ctx.confinement is not None and ctx.repository is None:
        ctx.repository = ctx.found_repository = ctx.confinement.repo
    if ctx.confinement is None:
        ctx.sandbox = why or "off"
        if why:
            ctx.log.hold(f"# loopctl: {why}")
        return _scoped(ctx, loop)
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


def _scoped(ctx: RunContext, loop: LoopDef) -> Callable[[], None] | None:
    """An unconfined run still keeps to its process bounds where Landlock
    is here: its signals scoped, no cgroup file writable (engine/scope.py).
    Not an agent whose own sandbox needs mount(2) (codex, run with
    `--sandbox off` to keep it): that sandbox would fail in any domain."""
    from loopctl.agents.presets import binary
    from loopctl.domain.agent_cli import OWN_SANDBOX, agent_cli
    from loopctl.engine import landlock, scope
    from loopctl.engine.sandbox import available

    version, why = available()
    if why is not None:
        return None
    own = agent_cli(list(loop.command) if loop.command else [binary(loop)])
    if own in OWN_SANDBOX:
        ctx.log.hold(f"# loopctl: unconfined, signals not scoped: {own}'s own sandbox "
                     "needs mount(2), which a Landlock domain denies")
        return None
    try:
        ctx.confinement = scope.for_unconfined(version)
    except (landlock.LandlockError, OSError) as exc:
        ctx.log.hold(f"# loopctl: unconfined, and not even scoped: {exc}")
        return None
    if ctx.confinement is None:
        return None
    ctx.log.hold(f"# loopctl: {ctx.confinement.summary()}")
    return ctx.confinement.preexec


def given(ctx: RunContext) -> list[str]:
    """Files loopctl wrote for the run in its own run folder (the trigger's
    payload): each granted read-only, as a file, so the agent, its gate and
    its check read loopctl's copy, which none of them can change (the
    notes copy is in the decision folder, writable anyway)."""
    from loopctl.storage.triggers import run_payload

    payload = run_payload(ctx.store.paths, ctx.name, ctx.run_id)
    return [str(payload[0])] if payload else []


def release(ctx: RunContext) -> None:
    """After the run: the ruleset's descriptor and the private TMPDIR."""
    if ctx.confinement is not None:
        ctx.confinement.close()
        ctx.confinement = None
