"""Step 4a: protected paths put back (`--protect PATH`, DESIGN §16), after the
agent exits, before the check and before the commit.

So the check runs the user's tests, not the agent's edit of them, and
nothing protected is committed, pushed or merged: what the agent changed
under a protected path is put back as at the run's base commit
(integrations/protect.py), its own commits that touched one are replaced by
loopctl's single commit from the base, and the run says so (the record's
`protected`, the note, one `protected_changed` event). When the paths
cannot be put back the run fails closed: no check, no commit and no
hand-off (`handoff_failed`), and the agent's decision does not stand.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loopctl.domain import protect as rules
from loopctl.domain.errors import LoopctlError
from loopctl.domain.model import LoopDef
from loopctl.domain.plain import factory, record, replace
from loopctl.domain.state import LoopState, RunResult
from loopctl.domain.untrusted import line
from loopctl.engine.steps.context import RunContext, add_dropped

if TYPE_CHECKING:
    from loopctl.integrations.workspace import Workspace


@record
class Guarded:
    """What the step did, on `ctx.protected`."""

    changed: list[str] = factory(list)
    flatten: bool = False
    failure: str | None = None


def restore(ctx: RunContext, ws: Workspace | None, loop: LoopDef, result: RunResult) -> None:
    """Put the loop's protected paths back in the run's worktree."""
    if ws is None or not loop.protect:
        return
    from loopctl.integrations import protect

    try:
        done = protect.restore(ws, loop.protect, loop.copy)
    except (LoopctlError, OSError) as exc:
        reason = line(exc.message if isinstance(exc, LoopctlError) else str(exc))[:300]
        ctx.protected = Guarded(failure=reason)
        result.decision = None
        ctx.log.write(f"# loopctl: protected paths could not be put back: {reason}")
        add_dropped(ctx, result, [f"protect failed: {reason}; no check, nothing committed, "
                                  "the decision does not stand"])
        return
    ctx.protected = Guarded(done.changed, done.flatten)
    if done.changed:
        said = rules.note(done.changed, ws.base_sha, done.flatten)
        ctx.log.write(f"# loopctl: {said}")
        add_dropped(ctx, result, [said])
    elif done.removed:
        ctx.log.write(f"# loopctl: protected paths: {len(done.removed)} ignored file(s) the "
                      "run left under them removed")


def failed(ctx: RunContext) -> bool:
    guarded = ctx.protected
    return guarded is not None and guarded.failure is not None


def hold(ctx: RunContext, loop: LoopDef) -> LoopDef:
    """Protected paths that could not be put back: nothing leaves the machine."""
    if not failed(ctx) or not loop.push:
        return loop
    return replace(loop, push=None, pr=False, merge=None)


def onto(ctx: RunContext, ws: Workspace) -> str | None:
    """Where loopctl's commit goes when the agent's commits touched a
    protected path: straight on the base, the agent's commits left out."""
    guarded = ctx.protected
    return ws.base_sha if guarded is not None and guarded.flatten else None


def record_fields(ctx: RunContext) -> dict[str, Any]:
    guarded = ctx.protected
    return rules.record_fields(guarded.changed) if guarded is not None else {}


def event(ctx: RunContext, loop: LoopDef, st: LoopState, log: str,
          now: float) -> dict[str, Any] | None:
    """One `protected_changed` attention event for a run that tried."""
    guarded = ctx.protected
    if guarded is None or not guarded.changed:
        return None
    from loopctl.engine import events

    text = rules.event_text(guarded.changed)
    out = events.attention(loop, st, ctx.run_id, log, now)
    out.update(reason="protected_changed", summary=f"{loop.name}: protected changed: {text}",
               evidence={"source": "loopctl", "text": text},
               protected=[line(p) for p in guarded.changed[:rules.RECORDED]])
    return out
