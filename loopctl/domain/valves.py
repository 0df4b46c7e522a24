"""Safety valves: pure functions of a loop's definition, state and `now`.

Every loop is bounded by runs, calendar time and consecutive failures; these
checks run when a run settles and at every driver pass (DESIGN §4, §7).
"""

from __future__ import annotations

from loopctl.domain.durations import format_duration, format_usd, plural
from loopctl.domain.model import LoopDef
from loopctl.domain.state import ACTIVE, PAUSED, TERMINAL, LoopState, RunResult, past_deadline
from loopctl.fast.digests import sha256_hex
from loopctl.fast.lazy_re import lazy

KEEPALIVE_STRIKES = 2
RATE_LIMIT_BACKOFF = 300.0
RATE_LIMIT_BACKOFF_CAP = 3600.0
MIN_DEFERRAL = 60.0
LOOP_ONLY_HOLD = 3600.0  # a limit only the agent's words reported (DESIGN §18)
MAX_DEFERRAL = 7 * 86400.0
_TIMESTAMPS = lazy(
    r"\d{4}-\d{2}-\d{2}([T ]\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?"
    r"|\b\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?\b")


def no_progress_text(loop: LoopDef) -> str:
    """Why --no-progress paused the loop (`3 identical results in a row`)."""
    n = loop.no_progress
    if loop.check_metric:
        return f"{n} runs in a row with the check's metric unchanged"
    if loop.until_check:
        return f"{n} red checks in a row with the same output"
    return f"{n} identical results in a row"


def pause_for(st: LoopState, reason: str) -> None:
    st.status, st.reason = PAUSED, reason


def iteration_limit_reached(loop: LoopDef, st: LoopState) -> bool:
    return loop.max_runs > 0 and st.iterations >= loop.max_runs


def failure_limit_reached(loop: LoopDef, st: LoopState) -> bool:
    return loop.max_failures > 0 and st.failures >= loop.max_failures


def budget_reached(loop: LoopDef, st: LoopState) -> bool:
    """Spent at least the budget: the next run would start over it."""
    return loop.budget_usd is not None and st.cost_usd >= loop.budget_usd


def normalize_result(text: str) -> str:
    """A result's identity for the no-progress breaker: timestamps and
    whitespace do not make two results different."""
    return " ".join(_TIMESTAMPS.sub("<time>", text).split())


def result_digest(text: str) -> str:
    return sha256_hex(normalize_result(text).encode())[:16]


def no_progress_reached(loop: LoopDef, st: LoopState) -> bool:
    recent = st.results or []
    n = loop.no_progress
    return n > 0 and len(recent) >= n and len(set(recent[-n:])) == 1


def record_result(loop: LoopDef, st: LoopState, text: str | None) -> None:
    """Keep the digests of the last results (only as many as the breaker needs)."""
    if text is None or not text.strip():
        st.results = []
        return
    record_digest(loop, st, result_digest(text))


def record_digest(loop: LoopDef, st: LoopState, digest: str) -> None:
    """One run's identity for the breaker (a result's digest, or with
    --check-metric the metric: DESIGN §16)."""
    keep = max(loop.no_progress, 1)
    st.results = ((st.results or []) + [digest])[-keep:]


def rate_limit_resume_at(st: LoopState, reset_at: float | None, now: float) -> float:
    """Resume at the reset time the agent gave, else back off (x2, capped)."""
    return deferral_end(st, reset_at, now)[0]


def deferral_end(st: LoopState, reset_at: float | None, now: float,
                 loop_only: bool = False) -> tuple[float, str | None]:
    """When a deferral ends, and a note when the reported reset was moved:
    at least MIN_DEFERRAL from now (a limit "resetting" in 2 s must not buy
    a run every 2 s), at most LOOP_ONLY_HOLD when only free text said so,
    at most MAX_DEFERRAL otherwise (DESIGN §18)."""
    st.deferrals += 1
    ceiling = now + (LOOP_ONLY_HOLD if loop_only else MAX_DEFERRAL)
    if reset_at is None or reset_at <= now:
        backoff = now + min(RATE_LIMIT_BACKOFF * 2 ** (st.deferrals - 1),
                            RATE_LIMIT_BACKOFF_CAP)
        note = None if reset_at is None else \
            f"the reported reset time {_iso(reset_at)} has passed: backing off"
        return min(backoff, ceiling), note
    if reset_at < now + MIN_DEFERRAL:
        return now + MIN_DEFERRAL, (f"the reported reset time {_iso(reset_at)} is under "
                                    f"{MIN_DEFERRAL:g}s away: deferred {MIN_DEFERRAL:g}s")
    if reset_at > ceiling:
        why = "only the agent's text reported the limit" if loop_only else "the longest wait"
        return ceiling, (f"the reported reset time {_iso(reset_at)} clamped to "
                         f"{_iso(ceiling)} ({why})")
    return reset_at, None


def deferral_limit_reached(loop: LoopDef, st: LoopState) -> bool:
    return loop.max_deferrals > 0 and st.deferrals >= loop.max_deferrals


def observe(loop: LoopDef, st: LoopState, now: float) -> bool:
    """Checks at every driver pass: the calendar deadline (which runs while
    paused and while no scheduler runs), the end of a rate-limit deferral,
    and the budget. True when state changed."""
    if st.status in TERMINAL:
        return False
    if past_deadline(st, now):
        st.status, st.reason = "expired", None
        st.ended_at, st.observed_at = st.deadline, now
        st.next_due = None
        return True
    if st.status == PAUSED and st.reason in ("rate_limited", "auth_required"):
        # An account's auth_required has no resume_at: a run or the user lifts it.
        resume = st.resume_at
        if resume is not None and now >= resume:
            st.status, st.reason, st.resume_at = ACTIVE, None, None
            st.next_due = now
            return True
        return False
    if st.status == ACTIVE and budget_reached(loop, st):
        pause_for(st, "budget_limit")
        return True
    return False


def after_run(loop: LoopDef, st: LoopState, result: RunResult, now: float,
              fallback: bool = False) -> str | None:
    """Checks when a run settles, in order of what a human most needs to
    hear; a note for the run's record, if any. `fallback`: the loop has a
    fallback agent to take its fires while its account is held (§18)."""
    if result.outcome in ("deferred", "auth_error"):
        return _after_deferral(loop, st, result, now, fallback)
    st.deferrals = 0
    st.resume_at = None
    if past_deadline(st, now):
        observe(loop, st, now)
    elif failure_limit_reached(loop, st):
        pause_for(st, "failure_limit")
    elif loop.auto and st.keepalive_misses >= KEEPALIVE_STRIKES:
        pause_for(st, "keepalive_exhausted")
    elif no_progress_reached(loop, st):
        pause_for(st, "no_progress")
        st.note = f"no_progress: {no_progress_text(loop)}"  # kept: every view says why
    elif budget_reached(loop, st):
        pause_for(st, "budget_limit")
    elif iteration_limit_reached(loop, st):
        pause_for(st, "iteration_limit")
    return None


def _after_deferral(loop: LoopDef, st: LoopState, result: RunResult, now: float,
                    fallback: bool) -> str | None:
    """A usage limit or a refused login: wait (or let the fallback take the
    fires), bounded by --max-deferrals and, for a loop-only limit, an hour."""
    limited = result.outcome == "deferred"
    note = None
    if limited or result.loop_only:
        st.resume_at, note = deferral_end(st, result.reset_at if limited else None, now,
                                          result.loop_only)
    else:
        st.deferrals += 1
        st.resume_at = None  # until a run of its account succeeds (§18)
    if deferral_limit_reached(loop, st):
        pause_for(st, "deferral_limit")  # resume_at stays: the account's mark waits for it
    elif past_deadline(st, now):
        observe(loop, st, now)
    elif budget_reached(loop, st):
        pause_for(st, "budget_limit")
    elif fallback and not result.loop_only:
        pass  # stays active: its fires run the fallback while the account is held
    else:
        pause_for(st, "rate_limited" if limited else "auth_required")
    return note


def resume_refusal(loop: LoopDef, st: LoopState, now: float) -> str | None:
    """Why `resume` must refuse, or None. Limits are raised with `update`."""
    status = st.status
    if status in ("completed", "failed", "stopped"):
        return (f"the loop is {status} for good; remove it with `loopctl rm {loop.name}` and "
                f"start it again, or start a new loop under another --name")
    if past_deadline(st, now):
        return (f"duration_limit: the loop's deadline ({format_duration(loop.for_s)} from its "
                f"start) has passed; raise it with `loopctl update {loop.name} --for ...`")
    if iteration_limit_reached(loop, st):
        return (f"iteration_limit: {st.iterations}/{loop.max_runs} runs used; raise it "
                f"with `loopctl update {loop.name} --max-runs ...`")
    if budget_reached(loop, st):
        return (f"budget_limit: {format_usd(st.cost_usd)} of {format_usd(loop.budget_usd or 0)} "
                f"spent; raise it with `loopctl update {loop.name} --budget-usd ...`")
    return None


def pause_explained(loop: LoopDef, st: LoopState) -> str | None:
    """What paused this loop and the fix (`paused (failure_limit): 3
    failures in a row; fix the cause, then ...`), as a refused `run` says
    it; None unless it is paused. Reads `st` only: `fire_refusal` changes
    an active state alone, so a paused one needs no copy."""
    if st.status != PAUSED:
        return None
    return fire_refusal(loop, st)


def fire_refusal(loop: LoopDef, st: LoopState) -> str | None:
    """Why this loop may not fire now, with the fix; None when it may. Call
    after `observe` (deadline, budget, end of a rate limit) has run. A loop
    found at its run limit is paused here, as a due fire would pause it."""
    if st.status == ACTIVE and iteration_limit_reached(loop, st):
        pause_for(st, "iteration_limit")
    status, reason = st.status, st.reason
    if status == ACTIVE:
        return None
    if status in TERMINAL:
        return (f"{status}; remove it with `loopctl rm {loop.name}` and start it again, or "
                "start a new loop under another --name")
    fixes = {
        "user": f"`loopctl resume {loop.name}` first",
        "iteration_limit": f"{st.iterations}/{loop.max_runs} runs used; raise it with "
                           f"`loopctl update {loop.name} --max-runs N`, then resume",
        "failure_limit": f"{plural(st.failures, 'failure')} in a row; fix the cause, then "
                         f"`loopctl resume {loop.name}`",
        "budget_limit": f"{format_usd(st.cost_usd)} of "
                        f"{format_usd(loop.budget_usd or 0)} spent; "
                        f"raise it with `loopctl update {loop.name} --budget-usd X`",
        "no_progress": f"{no_progress_text(loop)}; change the objective or what the agent "
                       f"works on, then `loopctl resume {loop.name}`",
        "rate_limited": f"rate-limited until {_iso(st.resume_at)}; it resumes by itself",
        "deferral_limit": f"{st.deferrals} runs in a row deferred by a usage limit; "
                          f"check the agent's account, then `loopctl resume {loop.name}`",
        "auth_required": (st.note or "its agent needs a login or a key")
        + (f"; it tries again at {_iso(st.resume_at)}" if st.resume_at else
           f"; once fixed, `loopctl resume {loop.name}`"),
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
ESTIMATED_OUTCOMES = ("ok", "failed", "timeout", "killed", "lost", "deferred")


def charge(loop: LoopDef, st: LoopState, outcome: str, cost: float | None,
           tokens: int | None = None) -> float | None:
    """Add a run's cost to the loop's; the estimate charged in its place
    when it could not be read (None: the real cost, or nothing to charge).
    A cost read as 0 is a cost, unless the reader saw the run use tokens:
    then it is not believed (the agent's tree can write that line). Before
    any run cost something, the estimate is 0 and nothing is charged."""
    if cost:
        st.cost_usd = round(st.cost_usd + cost, 6)
        st.max_run_cost = max(st.max_run_cost, cost)
        return None
    estimate = st.max_run_cost
    if cost is not None and not tokens or loop.budget_usd is None or not estimate \
            or outcome not in ESTIMATED_OUTCOMES:
        return None
    st.cost_usd = round(st.cost_usd + estimate, 6)
    st.cost_estimated = True
    return estimate
