"""Confining the agent, its gate and its check (DESIGN §14) with the kernel's Landlock.

Decided in the supervisor, applied in the child between fork and exec
(after the bounds have put it in the run's cgroup), inherited by every
process it starts. `--sandbox on` that cannot be honoured raises: such a
run must not start. The sandbox module (and what it imports) is loaded only
for a run that is to be confined."""

from __future__ import annotations

from collections.abc import Callable

from loopctl.domain.agent_cli import is_agent
from loopctl.domain.confinement import mode_for, wants
from loopctl.domain.model import LoopDef
from loopctl.engine.run_context import RunContext, one_line
from loopctl.fast.data_class import record

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

    from loopctl.domain.state import LoopState
    from loopctl.engine.containment.sandbox import Confinement
    from loopctl.engine.containment.scope import Scope
    from loopctl.integrations.worktree import Workspace


@record
class Confined:
    """One command's confinement: the hook for its child, what the record
    says of it, and the domain to close once the command is done."""
    hook: Callable[[], None] | None
    sandbox: str  # `landlock ABI 7`, `off`, or why not
    held: Confinement | Scope | None = None

    def release(self) -> None:
        """The ruleset's descriptor and the private TMPDIR; twice is once."""
        held, self.held = self.held, None
        if held is not None:
            held.close()


def confine(ctx: RunContext, loop: LoopDef, cwd: str, env: dict[str, str],
            run: dict[str, Any], argv: list[str], files: list[str]) -> Confined:
    """How to confine one command; may change `env` and `argv` in place (a
    preset whose own sandbox cannot start inside loopctl's)."""
    if not wants(mode_for(loop.sandbox, run.get("sandbox_default")), is_agent(loop)):
        return _scoped(ctx, loop)
    from loopctl.engine.containment.sandbox import confined_argv, confinement_for

    own = [str(ctx.store.paths.config_dir), str(ctx.store.paths.state_dir)]
    found, why = confinement_for(
        loop, is_agent(loop), run.get("sandbox_default"), cwd, env,
        str(ctx.decision_path.parent), [*files, *given(ctx)], own, ctx.run_id,
        ctx.repository)
    if found is None:
        ctx.log.hold(f"# loopctl: {why}")
        return _scoped(ctx, loop, why)
    if ctx.repository is None:
        ctx.repository = ctx.found_repository = found.repo
    env.update(found.env())
    ctx.log.hold(f"# loopctl: {found.summary()}")
    changed = confined_argv(loop, argv)
    if changed != argv:  # in place: the record shows what really ran
        ctx.log.hold(f"# loopctl: confined, the agent runs {one_line(changed)}")
        argv[:] = changed
    return Confined(found.preexec, f"landlock ABI {found.ruleset.version}", found)


def recorded_repository(ctx: RunContext, st: LoopState, ws: Workspace | None) -> None:
    """What the run's sandboxes may read of its repository: loopctl's
    record of the worktree it made, or the repository recorded for the
    loop (None: a loop never looked up, found at its first confined run
    and recorded then). Never a `.git` read from the agent's folder."""
    if ws is not None:
        from loopctl.engine.repo_record import of_worktree

        ctx.repository = of_worktree(ws)
    elif isinstance(st.repository, list):
        ctx.repository = tuple(st.repository)


def _scoped(ctx: RunContext, loop: LoopDef, why: str | None = None) -> Confined:
    """An unconfined run still keeps to its process bounds where Landlock
    is here: its signals scoped, no cgroup file writable (engine/containment/scope.py).
    Not an agent whose own sandbox needs mount(2) (codex, run with
    `--sandbox off` to keep it): that sandbox would fail in any domain."""
    from loopctl.domain.agent_cli import OWN_SANDBOX, agent_cli
    from loopctl.engine.containment import landlock, scope

    unconfined = Confined(None, why or "off")
    version, unavailable = landlock.available()
    if unavailable is not None:
        return unconfined
    if loop.command:
        own = agent_cli(list(loop.command))
    else:
        from loopctl.agents.presets import binary

        own = agent_cli([binary(loop)])
    if own in OWN_SANDBOX:
        ctx.log.hold(f"# loopctl: unconfined, signals not scoped: {own}'s own sandbox "
                     "needs mount(2), which a Landlock domain denies")
        return unconfined
    try:
        held = scope.for_unconfined(version)
    except (landlock.LandlockError, OSError) as exc:
        ctx.log.hold(f"# loopctl: unconfined, and not even scoped: {exc}")
        return unconfined
    if held is None:
        return unconfined
    ctx.log.hold(f"# loopctl: {held.summary()}")
    return Confined(held.preexec, unconfined.sandbox, held)


def given(ctx: RunContext) -> list[str]:
    """Files loopctl wrote for the run in its own run folder (the trigger's
    payload): each granted read-only, as a file, so the agent, its gate and
    its check read loopctl's copy, which none of them can change (the
    notes copy is in the decision folder, writable anyway)."""
    from loopctl.storage.triggers import run_payload

    payload = run_payload(ctx.store.paths, ctx.name, ctx.run_id)
    return [str(payload[0])] if payload else []
