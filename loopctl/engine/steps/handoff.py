"""Step 5: commit what the agent left in its worktree and hand the branch off."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loopctl.domain.model import LoopDef
from loopctl.domain.state import RunResult
from loopctl.engine.steps.context import RunContext
from loopctl.engine.steps.wait import ignore_stop_signals

if TYPE_CHECKING:
    from loopctl.integrations.workspace import Handoff, Workspace


def commit_message(loop: LoopDef, run: dict[str, Any], result: RunResult) -> str:
    decision = result.decision or {}
    first = (result.result_text or "").strip().splitlines()[:1]
    what = decision.get("summary") or (first[0] if first else result.outcome)
    return f"loopctl: {loop.name} run {run['iteration']}: {what}"[:200]


def pr_body(loop: LoopDef, run_id: str, result: RunResult) -> str:
    decision = result.decision or {}
    return (f"{loop.prompt or 'file:' + str(loop.prompt_file)}\n\n"
            f"Decision: {decision.get('decision') or '-'}: {decision.get('summary') or '-'}"
            f"\nEvidence: {decision.get('evidence') or '-'}\nRun: {run_id}\n"
            f"Cost: ${result.cost_usd or 0:.4f}\n")[:60000]


def hand_off(ctx: RunContext, ws: Workspace, loop: LoopDef, run: dict[str, Any],
             result: RunResult) -> Handoff:
    """Commit, remove the worktree, push / open the PR / merge as asked."""
    from loopctl.integrations import workspace

    ignore_stop_signals()
    handoff = workspace.finish(ws, loop, ctx.run_id, commit_message(loop, run, result),
                               pr_body(loop, ctx.run_id, result))
    fields = handoff.record()
    # `hand-off: no_change, branch ...`: the kind first, not `handoff no_change`.
    ctx.log.write(f"# loopctl: hand-off: {fields.get('handoff')}" + "".join(
        f", {k} {v}" for k, v in fields.items() if v is not None and k != "handoff"))
    return handoff
