"""Step 5: commit what the agent left in its worktree; step 6: hand the branch off.

Two steps, so that one can sit between them (a check that gates the push).
From the commit on, a signal (`stop --kill` sends SIGTERM) no longer
interrupts: it is noted and stops the hand-off at its next step, as `stop`
or `pause` seen in the state do; a half-made commit or push helps no one.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from loopctl.domain.errors import LoopctlError
from loopctl.domain.model import LoopDef
from loopctl.domain.objective import objective_of
from loopctl.domain.state import LoopState, RunResult
from loopctl.domain.untrusted import line
from loopctl.engine.run_context import Guarded, RunContext
from loopctl.engine.run_signals import STOP_SIGNALS

if TYPE_CHECKING:
    from loopctl.integrations.delivery import Commit, Handoff
    from loopctl.integrations.worktree import Workspace


def commit_message(loop: LoopDef, run: dict[str, Any], result: RunResult) -> str:
    decision = result.decision or {}
    first = (result.result_text or "").strip().splitlines()[:1]
    what = line(decision.get("summary") or (first[0] if first else result.outcome))
    return f"loopctl: {loop.name} run {run['iteration']}: {what}"[:200]


def pr_body(loop: LoopDef, run_id: str, result: RunResult) -> str:
    decision = result.decision or {}
    return (f"{objective_of(loop)}\n\n"
            f"Decision: {decision.get('decision') or '-'}: {decision.get('summary') or '-'}"
            f"\nEvidence: {decision.get('evidence') or '-'}\nRun: {run_id}\n"
            f"Cost: ${result.cost_usd or 0:.4f}\n")[:60000]


STATE_POLL = 2.0  # seconds between reads of the state while a hand-off waits


def cancellation(ctx: RunContext) -> Callable[[], bool]:
    """From now on stop signals are noted, not raised; the callable, asked
    before each hand-off step, says whether to stop: a signal came, or the
    loop was stopped, paused or taken over since the run started. Once
    true it stays true."""
    seen: list[object] = []
    read_at = [-STATE_POLL]
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda num, _frame: seen.append(num))

    def cancelled() -> bool:
        # While checks are pending this is asked twice a second: the state
        # (one file for every loop) is read at most every STATE_POLL seconds.
        if seen or time.monotonic() - read_at[0] < STATE_POLL:
            return bool(seen)
        read_at[0] = time.monotonic()
        try:
            with ctx.store.lock():
                st: LoopState | None = ctx.store.read_state()["loops"].get(ctx.name)
        except LoopctlError:
            return False  # the state cannot be read: the signal flag still counts
        if st is None or (st.run or {}).get("run_id") != ctx.run_id \
                or st.after_run in ("stop", "pause") or st.status in ("stopped", "paused"):
            seen.append("state")
        return bool(seen)

    return cancelled


def commit(ctx: RunContext, ws: Workspace, loop: LoopDef, run: dict[str, Any],
           result: RunResult, guarded: Guarded | None = None) -> Commit:
    """What the agent left, committed on the run branch (nothing else moves).
    When the agent's commits touched a protected path, loopctl's commit goes
    straight on the base, the agent's commits left out."""
    from loopctl.integrations import delivery

    if guarded is not None and guarded.failed:
        # What it would commit may hold the agent's edit of protected paths.
        return delivery.Commit(failure="not committed: the protected paths could not be "
                               "put back")
    onto = ws.base_sha if guarded is not None and guarded.flatten else None
    return delivery.commit(ws, commit_message(loop, run, result), ctx.run_id,
                           loop.max_file_size, onto=onto)


def hand_off(ctx: RunContext, ws: Workspace, loop: LoopDef, run: dict[str, Any], made: Commit,
             result: RunResult, cancelled: Callable[[], bool]) -> Handoff:
    """Remove the worktree, then push / open the PR / merge as asked."""
    from loopctl.integrations import delivery, worktree

    worktree.remove(ws)
    handoff = delivery.hand_off(ws, loop, made, commit_message(loop, run, result),
                                pr_body(loop, ctx.run_id, result), cancelled)
    fields = handoff.record()
    # `hand-off: no_change, branch ...`: the kind first, not `handoff no_change`.
    ctx.log.write(f"# loopctl: hand-off: {fields.get('handoff')}" + "".join(
        f", {k} {v}" for k, v in fields.items() if v is not None and k != "handoff"))
    return handoff
