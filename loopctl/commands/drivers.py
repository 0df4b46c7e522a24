"""Firing by hand (`run`) and `decide` from inside a run."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from loopctl import clock
from loopctl.commands.common import locked_loop
from loopctl.domain import capacity, lifecycle, slots, valves
from loopctl.domain.errors import BusyError, NotFiring, UnreadableError, UsageError
from loopctl.domain.model import LoopDef
from loopctl.domain.state import LoopState
from loopctl.engine import events, procs
from loopctl.engine.accounts import Gate, gate_for, spec_for
from loopctl.engine.events import status_key as events_key
from loopctl.storage.store import Store

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

    from loopctl.domain.run_record import RunRecord
    from loopctl.domain.skipped import SkippedSlot

def claim_now(store: Store, name: str, mode: str = "manual",
              spawn: Callable[[str], int] | None = None,
              slot: str | None = None) -> tuple[str, bool]:
    """Claim a run of `name` now; its id, and whether it runs in a worktree.

    Supervised by this process, or with `spawn` (`loopctl serve`'s run now)
    by the process it starts for the run id, recorded before the lock goes.

    `manual` refuses a loop that is not active (exit 2); `force` runs it
    anyway; `api` is `manual` whose refusals name the API's way out;
    `scheduled` is what an external scheduler calls: it fires only when a
    due fire under `tick` would, and serves a slot (DESIGN §20):
    `slot` (an instant of the schedule) or the latest one at or before now,
    never one a run already took (exit 0, saying which run)."""
    from loopctl.engine.firing import noticed, settle_lost, take_payload
    from loopctl.engine.team_state import alive_for, shared_entries

    pending: events.Pending = []
    try:
        with locked_loop(store, name) as (defs, state, loop, now):
            st = state["loops"][name]
            instant, taken = _free_slot(store, state, loop, st, now, slot) \
                if mode == "scheduled" else (None, None)
            before = {n: events_key(other) for n, other in state["loops"].items()}
            gate, caps = gate_for(store, state, now), capacity.caps_of(defs.top)
            alive, entries = alive_for(store, state), shared_entries(store, state)
            result = lifecycle.plan(defs.loops, defs.invalid, state, now, alive,
                                    only=name, zones=clock.zone_of, accounts=gate, caps=caps)
            settle_lost(store, state, result.lost, now, alive)
            state["defs_sig"] = defs.signature
            busy = _busy(name, st, bool(result.fired)) \
                or _at_cap(name, defs.loops, state, caps, mode, bool(result.fired), alive)
            claimed = bool(result.fired)  # plan() claims a fire that is due and within limits
            refusal, waits = (None, False) if busy or claimed or mode == "force" \
                else _refusal(gate, loop, st, now)
            pending = noticed(store, defs, state, before, now)
            if busy or refusal or taken:
                _skips(store, result.slot_skips)
                store.write_state(state)
                _refuse(name, mode, busy, refusal, waits, taken, st)
            # A scheduler's late fire serves its slot: not also skipped (catch-up none).
            _skips(store, slots.unskip(st, result.slot_skips, name, instant))
            # If `name` was due, plan() has just claimed it as a scheduled fire.
            trigger = "schedule" if mode == "scheduled" else "manual"
            if not st.run:
                lifecycle.claim(loop, st, now, trigger, zone=clock.zone_of(loop),
                                instant=instant)
                preset = gate.check(loop, now).preset if mode != "force" else None
                if preset and st.run is not None:
                    st.run["preset"], st.run["fallback_from"] = preset, loop.agent
            elif instant is not None and st.run.get("trigger") == "schedule":
                _serve(st, st.run, instant)  # plan() claimed it as due: the slot asked for
            run = st.run
            _team_claim(store, defs, state, name, now, entries)
            run["spec"] = spec_for(loop, run)
            run["sandbox_default"] = defs.top.get("sandbox")  # DESIGN §14
            take_payload(store, name, run)
            run.update(events.receivers(loop, defs.top))
            run["supervisor"] = procs.ref(spawn(str(run["run_id"])) if spawn else None)
            store.write_state(state)
            return str(run["run_id"]), loop.worktree
    finally:
        events.dispatch(store, pending)


def _team_claim(store: Store, defs: Any, state: dict[str, Any], name: str, now: float,
                entries: dict[str, Any] | None) -> None:
    """With a team store, the store takes the claim too (DESIGN §21); a
    refusal is undone in the state, written, and said: the slot already
    ran on another machine (exit 0, as a slot that ran here says), or this
    machine's definition differs (exit 3: fix loops.yaml here)."""
    from loopctl.engine.team_claims import claim_fires, team_set

    if not team_set(defs):
        return
    run = state["loops"][name].run  # claimed just now: never None
    granted, refused, skips = claim_fires(store, defs, state, [(name, run)], now, entries)
    if granted:
        return
    _skips(store, skips)
    store.write_state(state)
    why = refused[0][1]
    if "already ran" in why or why.startswith("not for machine"):
        raise NotFiring(f"not firing {name}: {why}" if "already ran" not in why else why)
    raise UnreadableError(f"not firing {name}: {why}; make loops.yaml here match the team's")


def _skips(store: Store, entries: list[tuple[str, SkippedSlot]]) -> None:
    if entries:
        from loopctl.storage.runs import append_skips

        append_skips(store.paths, entries)


def _refuse(name: str, mode: str, busy: str | None, refusal: str | None, waits: bool,
            taken: str | None, st: LoopState) -> None:
    """Why this fire does not happen, as the error its exit code goes with."""
    if busy:
        raise BusyError(busy)
    if refusal is None:
        raise NotFiring(str(taken))
    if waits:
        raise BusyError(f"loop {name!r} is {refusal}")
    if mode == "scheduled":
        # Not an error: a completed loop must not turn cron red nightly.
        raise NotFiring(f"not firing {name}: it is {refusal}")
    raise UsageError(f"loop {name!r} is {refusal}{anyway(name, mode, st)}")


def _free_slot(store: Store, state: dict[str, Any], loop: LoopDef, st: LoopState, now: float,
               given: str | None) -> tuple[float | None, str | None]:
    """The schedule slot `run --scheduled` serves (domain/slots.for_scheduled):
    `given` (an instant of the schedule, not in the future: else exit 2) or
    the latest at or before now; and, if a run took it, the refusal saying
    which (exit 0). A loop with a run in flight or rate-limited says that
    first (exit 75)."""
    from loopctl.domain import slots

    asked = _given_instant(loop, st, given, now) if given is not None else None
    instant, why, entry = slots.for_scheduled(loop, st, now, clock.zone_of(loop), asked)
    if entry is not None:  # on record as every driver records it (DESIGN §20)
        from loopctl.storage.runs import append_skips

        append_skips(store.paths, [(loop.name, entry)])
        store.write_state(state)
    if why is None:
        return instant, None
    if entry is not None or instant is None or not st.run \
            and st.reason != "rate_limited":
        raise NotFiring(why)
    return instant, why


def _given_instant(loop: LoopDef, st: LoopState, given: str, now: float) -> float:
    """`--slot`: an instant of the loop's schedule, not in the future (else
    exit 2). A Kubernetes Job's slot (`k8s-job:CRONJOB:JOBNAME`) is its
    scheduled time; for an `--every` loop that is an instant of the CronJob
    the export made of its interval, served as it is."""
    from loopctl.domain import slots

    if given.startswith(slots.K8S_JOB):
        from loopctl.integrations.export.k8s import k8s_name

        instant = slots.k8s_job_instant(given, k8s_name(loop))
        interval = not loop.cron and not loop.auto and not loop.on_demand
    else:
        instant, interval = _slot_instant(given), False
    if not interval and not slots.is_instant(loop, st.created, instant,
                                             clock.zone_of(loop)):
        raise UsageError(f"bad --slot {given[:80]!r}: not an instant of loop "
                         f"{loop.name!r}'s schedule ({loop.schedule_key})")
    if instant > now:
        raise UsageError(f"bad --slot {given[:80]!r}: it is in the future")
    _after_creation(loop, given, instant)
    return instant


def _after_creation(loop: LoopDef, given: str, instant: float) -> None:
    """A slot from before the loop was started is none of its own: served,
    it would run once and then stay taken. Only a home that started the loop
    knows when (`created_at`); an exported home is new at its first fire and
    serves what its scheduler names (bounded by --catch-up-window)."""
    if not loop.created_at:
        return
    from loopctl.domain.timestamps import parse_iso

    if instant < parse_iso(loop.created_at):
        raise UsageError(f"bad --slot {given[:80]!r}: it is before loop {loop.name!r} was "
                         f"started ({loop.created_at})")


def _slot_instant(given: str) -> float:
    from loopctl.domain.timestamps import parse_iso

    try:
        instant = parse_iso(given)
    except (ValueError, OverflowError, OSError):
        instant = float("nan")
    if not instant == instant or instant < 0:  # NaN: not an instant
        raise UsageError(f"bad --slot {given[:40]!r}: expected a UTC instant like "
                         "2026-12-05T09:00:00Z")
    return instant


def _serve(st: LoopState, run: dict[str, Any], instant: float) -> None:
    from loopctl.domain import slots

    st.forget_slot(str(run["run_id"]))
    slots.remember(st, instant, f"run {run['run_id']}")
    run["slot"], run["due_at"] = slots.label(instant), instant


def _refusal(gate: Gate, loop: LoopDef, st: LoopState, now: float) -> tuple[str | None, bool]:
    """Why the loop may not fire now (its own state, or its account held
    with no free fallback), and whether that is a wait for a rate limit
    (exit 75) rather than a refusal."""
    from loopctl.domain.accounts import RATE_LIMITED, hold_note

    limited = st.reason == RATE_LIMITED
    refusal = valves.fire_refusal(loop, st)
    if refusal is not None:
        return refusal, limited
    verdict = gate.check(loop, now)
    entry = verdict.entry
    if entry is None:
        return None, limited
    notes = "; ".join(hold_note(m) for m in (entry, verdict.also) if m)
    return f"held ({entry.kind}): {notes}", limited or entry.kind == RATE_LIMITED


def _at_cap(name: str, loops: dict[str, Any], state: dict[str, Any], caps: capacity.Caps,
            mode: str, claimed: bool, alive: Any = procs.alive) -> str | None:
    """A run started by hand counts toward the concurrency cap and waits
    for it like a scheduled one (exit 75); `--force` runs it anyway."""
    if claimed or mode == "force":
        return None
    busy = capacity.in_flight(state["loops"], loops, alive)
    why = capacity.full(caps, busy, capacity.agent_of(loops.get(name)))
    if why is None:
        return None
    tail = "" if mode == "scheduled" else anyway(name, mode, None)
    return f"not starting {name!r}: {why}{tail}"


def anyway(name: str, mode: str, st: LoopState | None) -> str:
    """The way out of a refused run by hand: the CLI's `--force`; the API
    (`mode` api) has none, so its way (resume a paused loop, or wait)."""
    if mode != "api":
        return f"; or run it anyway with `loopctl run {name} --force`"
    if st is not None and st.status == "paused":
        return f"; from the API, resume it first: POST /api/loops/{name}/resume"
    return "" if st is not None else "; try again when a run ends"


def _busy(name: str, st: LoopState, claimed: bool) -> str | None:
    if st.run and not claimed:
        return f"loop {name!r} has a run in flight ({st.run['run_id']})"
    if st.orphan:
        return f"loop {name!r}: agent pid {st.orphan['pid']} of a lost run is still alive"
    return None


def run_now(store: Store, name: str, mode: str = "manual",
            slot: str | None = None) -> RunRecord:
    from loopctl.engine.supervisor import Supervisor

    run_id, _ = claim_now(store, name, mode, slot=slot)
    return Supervisor(store, name, run_id, foreground=True).run()


def decide(kind: str, summary: str | None, evidence: str | None,
           next_delay_s: int | None) -> None:
    """Write this run's decision where its supervisor reads it."""
    import json

    from loopctl.storage.atomic import atomic_write

    target = os.environ.get("LOOPCTL_DECISION_FILE")
    if not target:
        raise UsageError("loopctl decide only works inside a run (LOOPCTL_DECISION_FILE "
                         "is not set)")
    from loopctl.domain.untrusted import MAX_DECISION_TEXT, text

    for option, value in (("--summary", summary), ("--evidence", evidence)):
        if value is not None and text(value, MAX_DECISION_TEXT) is None:
            raise UsageError(f"bad {option}: expected UTF-8 text of at most "
                             f"{MAX_DECISION_TEXT} characters; shorten it")
    decision = {"version": 1, "decision": kind, "summary": summary, "evidence": evidence,
                "next_delay_s": next_delay_s}
    atomic_write(Path(target), json.dumps(decision).encode())
