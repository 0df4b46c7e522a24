"""Step 1: a fresh worktree for a `--worktree` run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from loopctl.domain.errors import LoopctlError
from loopctl.domain.model import parse_loop
from loopctl.engine.steps.context import RunContext
from loopctl.storage.paths import ensure_dir

if TYPE_CHECKING:  # a worktree run imports it; most runs never need git
    from loopctl.integrations.workspace import Workspace


def prepare_workspace(ctx: RunContext, worktree: bool | None) -> tuple[Workspace | None,
                                                                        str | None]:
    """The worktree and None, or None and why it could not be made.

    Made outside the store lock (a fetch may take a while). `worktree` is
    what the driver that claimed the run knew; None (a supervisor started by
    hand) means: look in the claimed run's definition."""
    if worktree is False:
        return None, None  # no second read of the state for the common case
    with ctx.store.lock():
        st = ctx.store.read_state()["loops"].get(ctx.name) or {}
        run = st.get("run") or {}
        if run.get("run_id") != ctx.run_id:
            return None, None  # launching says why
        loop = parse_loop(ctx.name, run["spec"])
        tracked = st.get("pr_feedback")
    if not loop.worktree:
        return None, None
    from loopctl.engine.steps import prfix
    from loopctl.integrations import workspace

    folder = ctx.store.paths.state_dir / "worktrees" / ctx.name
    found = prfix.look(ctx, loop, tracked)
    try:
        ensure_dir(folder.parent)
        ws = prfix.continuation(ctx, loop, folder, found) \
            or workspace.prepare(loop, ctx.run_id, folder)
    except LoopctlError as exc:
        return None, f"worktree: {exc.message}"
    ctx.log.hold(f"# loopctl: worktree {folder} on branch {ws.branch} from {ws.base_ref}")
    return ws, None
