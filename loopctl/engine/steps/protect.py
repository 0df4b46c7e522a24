"""Step 4a: protected paths put back (`--protect PATH`, DESIGN §16), after the
agent exits, before the check and before the commit.

What the check's runner reads without being told (conftest.py, its ini
files, `*.pth`, `-p` plugins, a module shadowing the runner: see
domain/check_reads.py) is put back with them. So the check runs the
user's tests, not the agent's edit of them, and nothing protected is
committed, pushed or merged: what the agent changed under a protected
path is put back as at the run's base commit (integrations/protect.py),
its own commits that touched one are replaced by loopctl's single commit
from the base, and the run says so (the record's
`protected`, the note, one `protected_changed` event). When the paths
cannot be put back the run fails closed: no check, no commit and no
hand-off (`handoff_failed`), and the agent's decision does not stand.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loopctl.domain import protect as rules
from loopctl.domain.errors import LoopctlError
from loopctl.domain.model import LoopDef
from loopctl.domain.state import RunResult
from loopctl.domain.untrusted import line
from loopctl.engine.run_context import Guarded, RunContext, add_dropped
from loopctl.fast.data_class import replace

if TYPE_CHECKING:
    from loopctl.integrations.worktree import Workspace


def restore(ctx: RunContext, ws: Workspace | None, loop: LoopDef,
            result: RunResult) -> Guarded | None:
    """Put the loop's protected paths back in the run's worktree; what was
    done (None: the loop protects nothing)."""
    if ws is None or not loop.protect:
        return None
    from loopctl.integrations import protect
    from loopctl.integrations.check_reads import runner_specs

    try:
        reads = runner_specs(ws, loop.check, loop.env)
        done = protect.restore(ws, loop.protect, loop.copy, reads)
    except (LoopctlError, OSError) as exc:
        reason = line(exc.message if isinstance(exc, LoopctlError) else str(exc))[:300]
        result.decision = None
        ctx.log.write(f"# loopctl: protected paths could not be put back: {reason}")
        add_dropped(ctx, result, [f"protect failed: {reason}; no check, nothing committed, "
                                  "the decision does not stand"])
        return Guarded(failure=reason)
    if done.changed:
        said = rules.note(done.changed, ws.base_sha, done.flatten)
        ctx.log.write(f"# loopctl: {said}")
        add_dropped(ctx, result, [said])
    elif done.removed:
        ctx.log.write(f"# loopctl: protected paths: {len(done.removed)} ignored file(s) the "
                      "run left under them removed")
    return Guarded(done.changed, done.flatten)


def hold(guarded: Guarded | None, loop: LoopDef) -> LoopDef:
    """Protected paths that could not be put back: nothing leaves the machine."""
    if guarded is None or not guarded.failed or not loop.push:
        return loop
    return replace(loop, push=None, pr=False, merge=None)
