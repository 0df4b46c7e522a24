"""Step 1: a fresh worktree for a `--worktree` run (or the branch of the PR
it continues, DESIGN §16)."""

from __future__ import annotations

from loopctl.domain.errors import LoopctlError
from loopctl.engine import pr_fix
from loopctl.engine.run_context import Claim, Prepared, RunContext
from loopctl.storage.paths import ensure_dir


def prepare_workspace(ctx: RunContext, claim: Claim) -> Prepared:
    """The worktree, or why it could not be made (launching fails the run
    with that note). Made with the store unlocked: a fetch may take a while."""
    from loopctl.integrations import worktree

    loop = claim.loop
    folder = ctx.store.paths.state_dir / "worktrees" / ctx.name
    found = pr_fix.look(ctx, loop, claim.state.pr_feedback)
    try:
        ensure_dir(folder.parent)
        ws = pr_fix.continuation(ctx, loop, folder, found) \
            or worktree.prepare(loop, ctx.run_id, folder)
    except LoopctlError as exc:
        return Prepared(None, f"worktree: {exc.message}", found)
    ctx.log.hold(f"# loopctl: worktree {folder} on branch {ws.branch} from {ws.base_ref}")
    return Prepared(ws, None, found)
