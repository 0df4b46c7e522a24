"""The user's `resume` of a loop (DESIGN §4); `pause` and `stop` are
LoopState's methods (they need the state alone): they act at once on an idle
loop, and asked for during a run they wait in `after_run` for
`LoopState.apply_control` when the run is folded back in
(domain/lifecycle.py). Pure, like the lifecycle: `now` and the loop's zone
come in.
"""

from __future__ import annotations

from datetime import tzinfo

from loopctl.domain import valves
from loopctl.domain.errors import UsageError
from loopctl.domain.model import LoopDef
from loopctl.domain.schedule import cron_next, next_fire
from loopctl.domain.state import ACTIVE, LoopState


def resume(loop: LoopDef, st: LoopState, now: float, *, zone: tzinfo) -> str:
    refusal = valves.resume_refusal(loop, st, now)
    if refusal:
        raise UsageError(refusal)
    if st.status == ACTIVE:
        if st.after_run == "pause":
            st.after_run = None
            return "resumed (the pending pause was cancelled)"
        return "already active"
    backed_off = st.failures > 0
    if st.reason == "no_progress" and str(st.note or "").startswith("no_progress:"):
        st.note = None  # its why, said while it was paused
    st.status, st.reason = ACTIVE, None
    st.ended_at = st.observed_at = st.resume_at = None
    st.results = []
    st.failures = 0
    st.deferrals = 0
    st.keepalive_misses = 0
    if not st.run and backed_off and st.last_end is not None and not loop.cron:
        # The failures are forgiven, so is their backoff: a due time left
        # x8 out would look, to the next pass, like a clock set back.
        st.next_due = next_fire(loop, zone=zone, now=now, last_end=st.last_end,
                                created=st.created, failures=0)
    if not st.run and not loop.on_demand and (st.next_due is None or st.next_due < now):
        st.next_due = cron_next(loop.cron, zone, now) if loop.cron else now
    return "resumed"
