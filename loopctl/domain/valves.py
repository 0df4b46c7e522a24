"""Safety valves: pure functions of a loop's definition, state and `now`.

Every loop is bounded by runs, calendar time and consecutive failures; these
checks run when a run settles and at every driver pass (DESIGN §4, §7).
"""

from __future__ import annotations

import hashlib
import re

from loopctl.domain.durations import format_duration, format_usd
from loopctl.domain.model import LoopDef
from loopctl.domain.state import ACTIVE, PAUSED, TERMINAL, LoopState, RunResult, past_deadline

KEEPALIVE_STRIKES = 2
RATE_LIMIT_BACKOFF = 300.0
RATE_LIMIT_BACKOFF_CAP = 3600.0
_TIMESTAMPS = re.compile(
    r"\d{4}-\d{2}-\d{2}([T ]\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?"
    r"|\b\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?\b")


def pause_for(st: LoopState, reason: str) -> None:
    st["status"], st["reason"] = PAUSED, reason


def iteration_limit_reached(loop: LoopDef, st: LoopState) -> bool:
    return loop.max_runs > 0 and st["iterations"] >= loop.max_runs


def failure_limit_reached(loop: LoopDef, st: LoopState) -> bool:
    return loop.max_failures > 0 and st["failures"] >= loop.max_failures


def budget_reached(loop: LoopDef, st: LoopState) -> bool:
    """Spent at least the budget: the next run would start over it."""
    return loop.budget_usd is not None and st.get("cost_usd", 0.0) >= loop.budget_usd


def normalize_result(text: str) -> str:
    """A result's identity for the no-progress breaker: timestamps and
    whitespace do not make two results different."""
    return " ".join(_TIMESTAMPS.sub("<time>", text).split())


def result_digest(text: str) -> str:
    return hashlib.sha256(normalize_result(text).encode()).hexdigest()[:16]


def no_progress_reached(loop: LoopDef, st: LoopState) -> bool:
    recent = st.get("results") or []
    n = loop.no_progress
    return n > 0 and len(recent) >= n and len(set(recent[-n:])) == 1


def record_result(loop: LoopDef, st: LoopState, text: str | None) -> None:
    """Keep the digests of the last results (only as many as the breaker needs)."""
    if text is None or not text.strip():
        st["results"] = []
        return
    record_digest(loop, st, result_digest(text))


def record_digest(loop: LoopDef, st: LoopState, digest: str) -> None:
    """One run's identity for the breaker (a result's digest, or with
    --check-metric the metric: DESIGN §16)."""
    keep = max(loop.no_progress, 1)
    st["results"] = ((st.get("results") or []) + [digest])[-keep:]


def rate_limit_resume_at(st: LoopState, reset_at: float | None, now: float) -> float:
    """Resume at the reset time the agent gave, else back off (x2, capped)."""
    st["deferrals"] = st.get("deferrals", 0) + 1
    if reset_at is not None and reset_at > now:
        return reset_at
    backoff = RATE_LIMIT_BACKOFF * 2 ** (st["deferrals"] - 1)
    return now + min(backoff, RATE_LIMIT_BACKOFF_CAP)


def observe(loop: LoopDef, st: LoopState, now: float) -> bool:
    """Checks at every driver pass: the calendar deadline (which runs while
    paused and while no scheduler runs), the end of a rate-limit deferral,
    and the budget. True when state changed."""
    if st["status"] in TERMINAL:
        return False
    if past_deadline(st, now):
        st["status"], st["reason"] = "expired", None
        st["ended_at"], st["observed_at"] = st["deadline"], now
        st["next_due"] = None
        return True
    if st["status"] == PAUSED and st["reason"] == "rate_limited":
        resume = st.get("resume_at")
        if resume is not None and now >= resume:
            st["status"], st["reason"], st["resume_at"] = ACTIVE, None, None
            st["next_due"] = now
            return True
        return False
    if st["status"] == ACTIVE and budget_reached(loop, st):
        pause_for(st, "budget_limit")
        return True
    return False


def after_run(loop: LoopDef, st: LoopState, result: RunResult, now: float) -> None:
    """Checks when a run settles, in order of what a human most needs to hear."""
    if result.outcome == "deferred":
        st["resume_at"] = rate_limit_resume_at(st, result.reset_at, now)
        pause_for(st, "rate_limited")
        return
    if result.outcome == "auth_error":
        st["resume_at"] = None
        pause_for(st, "auth_required")  # until a run of its account succeeds (§18)
        return
    st["deferrals"] = 0
    if past_deadline(st, now):
        observe(loop, st, now)
    elif failure_limit_reached(loop, st):
        pause_for(st, "failure_limit")
    elif loop.auto and st["keepalive_misses"] >= KEEPALIVE_STRIKES:
        pause_for(st, "keepalive_exhausted")
    elif no_progress_reached(loop, st):
        pause_for(st, "no_progress")
    elif budget_reached(loop, st):
        pause_for(st, "budget_limit")
    elif iteration_limit_reached(loop, st):
        pause_for(st, "iteration_limit")


def resume_refusal(loop: LoopDef, st: LoopState, now: float) -> str | None:
    """Why `resume` must refuse, or None. Limits are raised with `update`."""
    status = st["status"]
    if status in ("completed", "failed", "stopped"):
        return (f"the loop is {status} for good; remove it with `loopctl rm {loop.name}` and "
                f"start it again, or start a new loop under another --name")
    if past_deadline(st, now):
        return (f"duration_limit: the loop's deadline ({format_duration(loop.for_s)} from its "
                "start) has passed; raise it with `loopctl update NAME --for ...`")
    if iteration_limit_reached(loop, st):
        return (f"iteration_limit: {st['iterations']}/{loop.max_runs} runs used; raise it "
                "with `loopctl update NAME --max-runs ...`")
    if budget_reached(loop, st):
        return (f"budget_limit: {format_usd(st['cost_usd'])} of {format_usd(loop.budget_usd or 0)} "
                "spent; raise "
                "it with `loopctl update NAME --budget-usd ...`")
    return None


def fire_refusal(loop: LoopDef, st: LoopState) -> str | None:
    """Why this loop may not fire now, with the fix; None when it may. Call
    after `observe` (deadline, budget, end of a rate limit) has run. A loop
    found at its run limit is paused here, as a due fire would pause it."""
    if st["status"] == ACTIVE and iteration_limit_reached(loop, st):
        pause_for(st, "iteration_limit")
    status, reason = st["status"], st.get("reason")
    if status == ACTIVE:
        return None
    if status in TERMINAL:
        return (f"{status}; remove it with `loopctl rm {loop.name}` and start it again, or "
                "start a new loop under another --name")
    fixes = {
        "user": f"`loopctl resume {loop.name}` first",
        "iteration_limit": f"{st['iterations']}/{loop.max_runs} runs used; raise it with "
                           f"`loopctl update {loop.name} --max-runs N`, then resume",
        "failure_limit": f"{st['failures']} failures in a row; fix the cause, then "
                         f"`loopctl resume {loop.name}`",
        "budget_limit": f"{format_usd(st.get('cost_usd', 0))} of "
                        f"{format_usd(loop.budget_usd or 0)} spent; "
                        f"raise it with `loopctl update {loop.name} --budget-usd X`",
        "rate_limited": f"rate-limited until {_iso(st.get('resume_at'))}; it resumes by itself",
        "auth_required": (st.get("note") or "its agent needs a login or a key")
        + f"; once fixed, `loopctl resume {loop.name}`",
    }
    fix = fixes.get(reason or "", f"`loopctl resume {loop.name}` when ready")
    return f"paused ({reason}): {fix}"


def _iso(ts: float | None) -> str:
    from loopctl.domain.timestamps import iso

    return iso(ts) or "a backoff"


# A run whose agent ran and whose cost could not be read (killed, timed
# out, a crash) is charged the loop's most expensive run so far, when the
# loop has a budget (DESIGN §18): a runaway stuck in a tool loop until its
# timeout must not look free to --budget-usd.
ESTIMATED_OUTCOMES = ("ok", "failed", "timeout", "killed", "lost")


def charge(loop: LoopDef, st: LoopState, outcome: str, cost: float | None) -> float | None:
    """Add a run's cost to the loop's; the estimate charged in its place
    when it could not be read (None: the real cost, or nothing to charge).
    A cost read as 0 is a cost; before any run cost something, the
    estimate is 0 and nothing is charged."""
    if cost:
        st["cost_usd"] = round(st["cost_usd"] + cost, 6)
        st["max_run_cost"] = max(st["max_run_cost"], cost)
        return None
    estimate = st["max_run_cost"]
    if cost is not None or loop.budget_usd is None or not estimate \
            or outcome not in ESTIMATED_OUTCOMES:
        return None
    st["cost_usd"] = round(st["cost_usd"] + estimate, 6)
    return estimate
