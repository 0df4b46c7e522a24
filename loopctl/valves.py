"""Safety valves: pure functions of a loop's definition, state and `now`.

Every loop is bounded by runs, calendar time and consecutive failures; these
checks run when a run settles and at every driver pass (DESIGN §4, §7).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loopctl.durations import format_duration
from loopctl.model import LoopDef
from loopctl.state import ACTIVE, PAUSED, TERMINAL, LoopState

if TYPE_CHECKING:
    from loopctl.lifecycle import RunResult

KEEPALIVE_STRIKES = 2


def pause_for(st: LoopState, reason: str) -> None:
    st["status"], st["reason"] = PAUSED, reason


def iteration_limit_reached(loop: LoopDef, st: LoopState) -> bool:
    return loop.max_runs > 0 and st["iterations"] >= loop.max_runs


def failure_limit_reached(loop: LoopDef, st: LoopState) -> bool:
    return loop.max_failures > 0 and st["failures"] >= loop.max_failures


def observe(loop: LoopDef, st: LoopState, now: float) -> bool:
    """Checks at every driver pass: the calendar deadline (which runs while
    paused and while no scheduler runs). True when state changed."""
    if st["status"] in TERMINAL or now < st["deadline"]:
        return False
    st["status"], st["reason"] = "expired", None
    st["ended_at"], st["observed_at"] = st["deadline"], now
    st["next_due"] = None
    return True


def after_run(loop: LoopDef, st: LoopState, result: RunResult, now: float) -> None:
    """Checks when a run settles, in order of what a human most needs to hear."""
    if now >= st["deadline"]:
        observe(loop, st, now)
    elif failure_limit_reached(loop, st):
        pause_for(st, "failure_limit")
    elif loop.auto and st["keepalive_misses"] >= KEEPALIVE_STRIKES:
        pause_for(st, "keepalive_exhausted")
    elif iteration_limit_reached(loop, st):
        pause_for(st, "iteration_limit")


def resume_refusal(loop: LoopDef, st: LoopState, now: float) -> str | None:
    """Why `resume` must refuse, or None. Limits are raised with `update`."""
    status = st["status"]
    if status in ("completed", "failed", "stopped"):
        return f"the loop is {status}; start a new loop instead"
    if now >= st["deadline"]:
        return (f"duration_limit: the loop's deadline ({format_duration(loop.for_s)} from its "
                "start) has passed; raise it with `loopctl update NAME --for ...`")
    if iteration_limit_reached(loop, st):
        return (f"iteration_limit: {st['iterations']}/{loop.max_runs} runs used; raise it "
                "with `loopctl update NAME --max-runs ...`")
    if status == ACTIVE:
        return None
    return None
