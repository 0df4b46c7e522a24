"""`loopctl trigger NAME [--payload FILE|-]` (DESIGN §17).

Accepted when the loop could fire under `run --scheduled` rules: the loop
is armed for now (a daemon sees state.json change within a second; a tick
fires it), or, with a run in flight, given its one pending fire. Triggers
before the fire coalesce: the record counts them, the last payload wins.
"""

from __future__ import annotations

from loopctl.commands.common import locked_loop
from loopctl.domain import valves
from loopctl.domain.errors import UsageError
from loopctl.domain.result import Result
from loopctl.domain.state import entries_of
from loopctl.domain.timestamps import iso
from loopctl.engine import procs
from loopctl.engine.store_wake import tell_others
from loopctl.fast.data_class import record
from loopctl.storage.store import Store


@record(frozen=True)
class Triggered(Result):
    """An accepted trigger: `triggers` coalesced into the next fire, `when`
    it fires (`now` or after `run_in_flight`), and which `driver` fires it
    (daemon, cron, cron_silent or none; `driver_pid`: the daemon's)."""

    loop: str
    accepted: bool
    triggers: int
    payload_bytes: int | None
    when: str
    run_in_flight: str | None
    at: str | None
    driver: str
    driver_pid: int | None


def trigger(store: Store, name: str, payload: str | None = None) -> Triggered:
    """Ask for a fire of `name` now. Unknown loop: exit 4; a loop that may
    not fire (paused, finished, rate-limited): exit 2 with the reason."""
    with locked_loop(store, name) as (defs, state, loop, now):
        st = entries_of(state)[name]
        changed = valves.observe(loop, st, now)
        refusal = valves.fire_refusal(loop, st)
        if refusal:
            if changed:
                store.write_state(state)  # an expiry seen is kept, as a driver would
            raise UsageError(f"not triggering {name}: it is {refusal}")
        running = st.run
        if running and procs.is_ancestor(running.get("supervisor")):
            # The run itself asking for another: that would bypass the
            # loop's pacing (a self-paced loop says `decide continue --next`).
            raise UsageError(f"not triggering {name}: this is its own run "
                             f"({running['run_id']}); a run cannot trigger its own loop")
        count = (st.triggered or {}).get("count", 0) + 1
        st.triggered = {"count": count, "at": now}
        if running:
            st.pending = True  # the one pending fire, taken when the run ends
        else:
            st.next_due = min(st.next_due, now) if st.next_due is not None else now
        if payload is not None:
            from loopctl.storage.triggers import keep_text

            keep_text(store, name, "trigger", payload)
        state["defs_sig"] = defs.signature
        store.write_state(state)
    tell_others(store, name)  # the team's daemons act on it within a second (DESIGN §21)
    kind, pid = driver(store, now)
    return Triggered(loop=name, accepted=True, triggers=count,
                     payload_bytes=len(payload.encode()) if payload is not None else None,
                     when="after the run in flight" if running else "now",
                     run_in_flight=running["run_id"] if running else None,
                     at=iso(now), driver=kind, driver_pid=pid)


def driver(store: Store, now: float) -> tuple[str, int | None]:
    """What will act on the trigger: `daemon` (within a second), `cron`
    (its next tick), `cron_silent` (a line whose ticks have not reached
    this home lately) or `none`, with the daemon's pid."""
    from loopctl.commands.doctor_drivers import cron_driver, cron_ticks
    from loopctl.storage.lease import LeaseFile, is_live

    lease = LeaseFile(store.paths, "trigger")
    holder = lease.read()
    if holder is not None and holder.role == "daemon" and is_live(
            holder, now, lease.ttl, lease.host,
            lambda pid, ct: procs.alive({"pid": pid, "ct": ct})):
        return "daemon", holder.pid
    cron = cron_driver(store)
    if not cron.fires():
        return "none", None
    return ("cron" if cron_ticks(store, "")[0] == "ok" else "cron_silent"), None
