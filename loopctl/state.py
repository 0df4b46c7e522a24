"""Runtime state of loops: the shape of `state.json` and its pure helpers.

One entry per loop, keyed by name. Times are POSIX seconds. The top level
carries what the `tick` fast path needs to decide, without loading YAML or
taking a lock, that nothing is due: the signature of the `loops.yaml` the
state was reconciled against, the earliest time anything needs attention
(`wake_at`) and whether any run is in flight (`busy`).
"""

from __future__ import annotations

from typing import Any

from loopctl.model import LoopDef
from loopctl.schedule import first_fire, parse_iso

ACTIVE, PAUSED = "active", "paused"
TERMINAL = ("completed", "failed", "stopped", "expired")
RECENT = 10

LoopState = dict[str, Any]


def new_loop_state(loop: LoopDef, now: float) -> LoopState:
    created = parse_iso(loop.created_at) if loop.created_at else now
    return {
        "status": ACTIVE, "reason": None,
        "created": created, "deadline": created + loop.for_s,
        "schedule_key": loop.schedule_key,
        "next_due": first_fire(loop, created),
        "iterations": 0, "failures": 0, "seq": 0,
        "last_end": None, "last_outcome": None, "last_run_id": None,
        "outcomes": [], "run": None, "pending": False, "after_run": None,
        "orphan": None, "cost_usd": 0.0, "session_id": None,
        "keepalive_misses": 0, "results": [], "last_decision": None,
        "ended_at": None, "observed_at": None, "resume_at": None, "note": None,
        "deferrals": 0, "hook_error": None,
    }


def wake_time(st: LoopState) -> float | None:
    """When this loop next needs a driver's attention, if ever."""
    if st["status"] in TERMINAL:
        return None
    times = [st["deadline"]]
    if st["status"] == ACTIVE and st.get("next_due") is not None:
        times.append(st["next_due"])
    if st.get("resume_at") is not None:
        times.append(st["resume_at"])
    return min(times)


def in_flight(state: dict[str, Any]) -> bool:
    """A run, or the orphaned agent of a lost one, is still going somewhere."""
    return any(st.get("run") or st.get("orphan") for st in state["loops"].values())


def summarize(state: dict[str, Any]) -> None:
    """Recompute the fast-path fields from the loop entries."""
    wakes = [w for st in state["loops"].values() if (w := wake_time(st)) is not None]
    state["wake_at"] = min(wakes) if wakes else None
    state["busy"] = in_flight(state)


def display_status(st: LoopState | None) -> str:
    if st is None:
        return "invalid"
    if st.get("run"):
        return "running"
    return str(st["status"])
