"""PR feedback (DESIGN §16), for the worktree step and the settling.

Before a `--pr` run, look at the newest
PR the loop opened; when its checks failed, the run continues it (its
worktree on the PR's head branch). After the run, the loop's record of its
PR is kept up to date, and a PR out of fix attempts is left for review with
an attention event `needs_review`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loopctl.domain.errors import LoopctlError
from loopctl.domain.feedback import Plan
from loopctl.domain.model import LoopDef
from loopctl.domain.state import LoopState, tracked_pr
from loopctl.domain.untrusted import INVALID
from loopctl.engine.run_context import RunContext

if TYPE_CHECKING:
    from loopctl.integrations.delivery import Handoff
    from loopctl.integrations.worktree import Workspace


def look(ctx: RunContext, loop: LoopDef, tracked: dict[str, Any] | None) -> Plan | None:
    """Ask gh about the PR the loop follows, when there is one to ask about."""
    if not (loop.worktree and loop.pr and loop.fix_attempts and tracked) \
            or tracked.get("review"):
        return None
    from loopctl.integrations import pr_feedback, worktree

    try:
        repo, _ = worktree.repository(os.path.expanduser(loop.cwd))
    except LoopctlError:
        return None  # the worktree step says why
    found = pr_feedback.look(repo, loop, tracked)
    ctx.log.hold(f"# loopctl: PR {found.url}: {found.why}" + (
        f"; this run continues its branch {found.branch} (fix attempt {found.attempt} of "
        f"{found.limit})" if found.action == "continue" else ""))
    return found


def continuation(ctx: RunContext, loop: LoopDef, folder: Path,
                 found: Plan | None) -> Workspace | None:
    """The continuing run's worktree; None (and a note) when it cannot be
    made: the run then starts from the base as usual."""
    if found is None or found.action != "continue":
        return None
    from loopctl.integrations import pr_feedback

    try:
        return pr_feedback.continue_branch(loop, ctx.run_id, folder, found)
    except LoopctlError as exc:
        found.action, found.note = "none", f"not continued: {exc.message}"[:500]
        ctx.log.hold(f"# loopctl: PR {found.url}: {found.note}")
        return None


def settle(found: Plan | None, st: LoopState, handoff: Handoff | None) -> Handoff | None:
    """Under the store lock: the loop's record of its PR after this run
    (`found`: what the worktree step found); the `needs_review` hand-off
    to announce, if any."""
    from loopctl.integrations.delivery import Handoff

    tracked = st.pr_feedback
    review = None
    if found is not None and tracked and tracked.get("url") == found.url:
        if found.action == "drop":
            st.pr_feedback = None
        elif found.action == "continue":
            tracked["fixes"] = int(tracked.get("fixes") or 0) + 1
        elif found.action == "review":
            tracked["review"] = True
            review = Handoff("needs_review", {"branch": found.branch, "pr_url": found.url},
                             review=f"PR {found.url} left for review: {found.why}")
    opened = handoff.fields.get("pr_url") if handoff is not None else None
    if opened and handoff is not None and handoff.handoff != "pr_updated" \
            and not handoff.fields.get("merged"):
        new = tracked_pr({"url": opened, "branch": handoff.fields.get("branch"), "fixes": 0,
                          "review": False})
        if new is not INVALID:
            st.pr_feedback = new
    return review
