"""Lifecycle transitions of a loop (DESIGN §3-§5). Pure: `now` and the zone
(or `zones`, which gives each loop's) come in; process liveness arrives as a
callback. A driver pass (`plan`) reconciles state with the definitions,
notices lost runs and expiries, and claims every due loop; `settle` folds a
finished run back in and carries out a `pause` or `stop` asked for during
the run (`pause` and `stop` are LoopState's methods, `resume` domain/verbs.py).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, tzinfo

from loopctl.domain import capacity, slots, valves, verify
from loopctl.domain.accounts import Verdict, hold
from loopctl.domain.model import LoopDef
from loopctl.domain.schedule import (
    Zones,
    clamp_delay,
    cron_next,
    latest_plausible_due,
    next_fire,
    tick_early,
)
from loopctl.domain.skipped import SkippedSlot
from loopctl.domain.state import (
    ACTIVE,
    PAUSED,
    RECENT,
    TERMINAL,
    LoopState,
    RunResult,
    Settled,
    new_loop_state,
)
from loopctl.domain.timestamps import UTC, iso, parse_iso
from loopctl.fast.data_class import factory, record

# A fire observed later than this counts as missed for `--catch-up none`; a
# minutely cron tick may legitimately fire up to a minute late.
CATCH_UP_GRACE = 120.0

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any, Protocol

    ProcRef = dict[str, Any]
    Alive = Callable[[ProcRef | None], bool]

    class AccountGate(Protocol):
        """Asked before a due fire is claimed (engine/accounts.py)."""

        def check(self, loop: LoopDef, now: float) -> Verdict: ...


@record
class Pass:
    """What one driver pass decided; the driver carries it out."""

    fired: list[tuple[str, dict[str, Any]]] = factory(list)
    skipped: list[tuple[str, str]] = factory(list)
    lost: list[tuple[str, dict[str, Any]]] = factory(list)
    replace: list[tuple[str, dict[str, Any]]] = factory(list)
    deferred: list[tuple[str, float]] = factory(list)
    # Held by their account's mark (DESIGN §18): its one event names them.
    held: list[str] = factory(list)
    # Due and within limits, beyond a concurrency cap: (name, queued since).
    queued: list[tuple[str, float]] = factory(list)
    # Due and within limits: (name, missed); `admit` claims or queues them.
    due: list[tuple[str, int]] = factory(list)
    # The fallback preset a due loop's fire runs with (its account is held).
    fallback: dict[str, str] = factory(dict)
    # The schedule slot a due loop's fire serves (DESIGN §20).
    slot: dict[str, float] = factory(dict)
    # Due slots that did not run: (name, record for runs/<loop>/skipped.jsonl).
    slot_skips: list[tuple[str, SkippedSlot]] = factory(list)
    changed: bool = False


def run_id_for(now: float, seq: int) -> str:
    return datetime.fromtimestamp(int(now), UTC).strftime("%Y%m%dT%H%M%SZ") + f"-{seq:04d}"


def reconcile(loops: dict[str, LoopDef], invalid: dict[str, str],
              state: dict[str, Any], now: float, zones: Zones, shared: bool = False) -> bool:
    """Bring state in line with the definitions; True when something changed.
    `shared`: a team's state (§21): a loop not defined here stays (only `rm` drops it)."""
    changed = False
    entries: dict[str, LoopState] = state["loops"]
    for name, loop in loops.items():
        st = entries.get(name)
        if st is None:
            entries[name] = new_loop_state(loop, now, zone=zones(loop))
            changed = True
            continue
        if st.created is None:
            # Reset by a repair of a damaged entry: the definition knows.
            st.created = parse_iso(loop.created_at) if loop.created_at else now
            changed = True
        if st.schedule_key != loop.schedule_key:
            st.schedule_key = loop.schedule_key
            if st.next_due is not None or st.status == ACTIVE and not st.run:
                st.next_due = next_fire(loop, zone=zones(loop), now=now,
                                           last_end=st.last_end or now,
                                           created=st.created)
            changed = True
        if st.status == ACTIVE and not st.run and st.next_due is None \
                and not loop.on_demand:
            # Armed nowhere (its run was lost while the entry was invalid).
            st.next_due = next_fire(loop, zone=zones(loop), now=now,
                                       last_end=st.last_end or now, created=st.created)
            changed = True
        deadline = st.created + loop.for_s
        if st.deadline != deadline:
            st.deadline = deadline
            changed = True
    for name in [n for n in entries if n not in loops and n not in invalid and not shared]:
        if not entries[name].run:
            del entries[name]
            changed = True
    return changed


def claim(loop: LoopDef, st: LoopState, now: float, trigger: str,
          missed: int = 0, *, zone: tzinfo, instant: float | None = None) -> str:
    """Record a fire before anything is launched: the exactly-once point.
    A scheduled fire serves the slot `instant` (default: the due time) and
    takes it in the state (DESIGN §20). The run's id; the run is `st.run`."""
    st.seq += 1
    st.iterations += 1
    triggered, st.triggered = st.triggered, None
    if triggered:
        trigger = "api"  # the fire a trigger asked for, whoever takes it
    run = {
        "run_id": run_id_for(now, st.seq), "iteration": st.iterations,
        "due_at": now, "claimed_at": now, "missed": missed, "trigger": trigger,
        "supervisor": None, "agent": None,
    }
    _take_slot(st, run, triggered, instant if instant is not None else st.next_due, now)
    if triggered:
        run["triggers"] = triggered["count"]
    queued_at = st.queued_at
    if queued_at is not None:  # it waited for a slot (DESIGN §18)
        run["queued_s"] = round(max(now - queued_at, 0.0), 3)
        st.queued_at = None
    st.run = run
    st.pending = False
    # Cron keeps counting slots while a run is in flight so overlap can act;
    # interval and self-paced loops wait for the run to end.
    st.next_due = cron_next(loop.cron, zone, now) if loop.cron else None
    return str(run["run_id"])


def _take_slot(st: LoopState, run: dict[str, Any], triggered: dict[str, Any] | None,
               instant: float | None, now: float) -> None:
    """The run's `slot` and `due_at` (DESIGN §20): a schedule slot is
    remembered as taken by this run; a fire with no schedule instant at or
    before now (auto pace fired by an external scheduler) is a manual one."""
    if triggered:
        run["slot"] = f"trigger:{iso(triggered['at'])}"
    elif run["trigger"] == "schedule" and instant is not None and instant <= now:
        run["due_at"], run["slot"] = instant, slots.label(instant)
        slots.remember(st, instant, f"run {run['run_id']}")
    else:
        run["slot"] = f"manual:{run['run_id']}"


def plan(loops: dict[str, LoopDef], invalid: dict[str, str], state: dict[str, Any],
         now: float, alive: Alive, only: str | None = None, *, zones: Zones,
         accounts: AccountGate | None = None, caps: capacity.Caps | None = None,
         minute_tick: bool = False) -> Pass:
    """Claim what is due, up to `caps` (None: no cap), holding the loops
    whose account is held (`accounts`); a `minute_tick` takes `tick_early`."""
    result = Pass()
    entries: dict[str, LoopState] = state["loops"]
    for name, st in entries.items():
        if only is not None and name != only:
            continue
        loop = loops.get(name)
        if st.run:
            _check_in_flight(loop, name, st, now, alive, result, zones)
            continue
        if st.orphan:
            if alive(st.orphan):
                result.skipped.append((name, f"agent pid {st.orphan['pid']} of a lost run "
                                             "is still alive"))
                continue
            st.orphan = None
            result.changed = True
        if loop is None:
            result.skipped.append((name, f"invalid: {invalid.get(name, 'no definition')}"))
            continue
        since = slots.deferral(st)
        if valves.observe(loop, st, now):
            result.changed = True
            if (entry := slots.resumed(loop, st, since, now, zones(loop))) is not None:
                result.slot_skips.append((name, entry))
        _plan_idle(loop, name, st, now, result, zones(loop), accounts, minute_tick)
    for name in invalid:
        if name not in entries and (only is None or only == name):
            result.skipped.append((name, f"invalid: {invalid[name]}"))
    admit(loops, entries, now, alive, caps, result, only, zones=zones)
    return result


def admit(loops: dict[str, LoopDef], entries: dict[str, LoopState], now: float, alive: Alive,
          caps: capacity.Caps | None, result: Pass, only: str | None = None, *,
          zones: Zones) -> None:
    """Claim the due loops there is room for, oldest due first; the rest
    stay due and are marked queued (DESIGN §18). Counted here, under the
    lock the claims are made under, from what state.json says is running."""
    due = {name: missed for name, missed in result.due}
    started, waiting = list(due), list[str]()
    if caps is not None:
        busy = capacity.in_flight(entries, loops, alive)
        started, waiting = capacity.admit(
            ((n, _due_at(entries[n]), capacity.agent_of(loops[n])) for n in due), busy, caps)
    for name in started:
        st, loop = entries[name], loops[name]
        reason = "missed" if st.queued_at is None else "deferred"  # by the cap
        run_id = claim(loop, st, now, "schedule", due[name], zone=zones(loop),
                       instant=result.slot.get(name))
        run = st.run
        assert run is not None  # claim set it
        if due[name]:  # those slots, folded into this catch-up run
            result.slot_skips.append((name, slots.skip(st, reason, None, now, count=due[name],
                                                       run_id=run_id)))
        if name in result.fallback:
            # The fallback agent runs this fire (engine/accounts.spec_for).
            run["preset"], run["fallback_from"] = result.fallback[name], loop.agent
        result.fired.append((name, run))
        result.changed = True
    for name in waiting:
        st = entries[name]
        if st.queued_at is None:
            st.queued_at = now
            result.changed = True
        result.queued.append((name, st.queued_at))
    for name, st in entries.items():
        # No longer waiting (paused, edited, removed from the queue by a run).
        if st.queued_at is not None and name not in due and (only in (None, name)):
            st.queued_at = None
            result.changed = True


def _due_at(st: LoopState) -> float:
    assert st.next_due is not None  # `_plan_idle` found the loop due by it
    return st.next_due


def _plan_idle(loop: LoopDef, name: str, st: LoopState, now: float, result: Pass,
               zone: tzinfo, accounts: AccountGate | None = None, tick: bool = False) -> None:
    if st.status == PAUSED and st.reason == "rate_limited":
        result.deferred.append((name, st.resume_at or now))
        return
    if st.status != ACTIVE:
        reason = f": {st.reason}" if st.reason else ""
        result.skipped.append((name, f"{st.status}{reason}"))
        return
    due = st.next_due
    ran = st.last_end is not None
    if due is not None and due > latest_plausible_due(loop, now, st.failures, ran,
                                                      zone=zone):
        # Re-armed as if the last run ended now: no duplicate run, no stall.
        due = st.next_due = next_fire(loop, zone=zone, now=now,
                                         last_end=now if ran else None,
                                         created=now, failures=st.failures)
        st.note = "the clock went back; re-armed from now"
        result.changed = True
    if due is None or due > now + (tick_early(loop) if tick else 0.0):
        result.skipped.append((name, "not due"))
        return
    if valves.iteration_limit_reached(loop, st):
        valves.pause_for(st, "iteration_limit")
        result.changed = True
        result.skipped.append((name, "paused: iteration_limit"))
        return
    # A trigger asked for this fire: no occurrence was missed, none is skipped.
    missed, latest = (0, None) if st.triggered else slots.walk_due(loop, due, now, zone)
    if not st.triggered:  # DESIGN §20: the slot this fire serves
        instant, why, entry = slots.due_slot(loop, st, due, now, zone, latest, missed)
        if entry is not None:
            result.slot_skips.append((name, entry))
        if why is not None:
            result.changed = True
            result.skipped.append((name, why))
            return
        result.slot[name] = instant
    if loop.catch_up == "none" and now - due > CATCH_UP_GRACE and not st.triggered:
        st.next_due = next_fire(loop, zone=zone, now=now, last_end=now,
                                   created=st.created)
        st.note = f"skipped {missed + 1} missed occurrence(s) (catch-up none)"
        result.slot_skips.append((name, slots.skip(st, "catch_up_none", result.slot.pop(
            name, due), now, count=missed + 1)))
        result.changed = True
        result.skipped.append((name, "missed (catch-up none)"))
        return
    verdict = accounts.check(loop, now) if accounts is not None else None
    if verdict is not None and verdict.entry is not None:
        hold(st, verdict.entry, name, verdict.also)  # no agent spends its timeout finding out
        result.slot_skips.append((name, slots.skip(st, "held", result.slot.pop(name, due), now,
                                                   kind=verdict.entry.kind)))
        result.held.append(name)
        result.skipped.append((name, f"paused: {verdict.entry.kind} (account)"))
        result.changed = True
        return
    if verdict is not None and verdict.preset:
        result.fallback[name] = verdict.preset
    result.due.append((name, missed))


def _check_in_flight(loop: LoopDef | None, name: str, st: LoopState, now: float,
                     alive: Alive, result: Pass, zones: Zones) -> None:
    run = st.run
    assert run is not None  # the caller saw it
    if not alive(run.get("supervisor")):
        result.lost.append((name, run))
        st.run = None
        if run.get("agent") and alive(run["agent"]):
            st.orphan = run["agent"]
            result.skipped.append((name, f"agent pid {run['agent']['pid']} of lost run "
                                         f"{run['run_id']} is still alive"))
        _after_lost(loop, st, run, now, zones)
        result.changed = True
        return
    result.skipped.append((name, f"running ({run['run_id']})"))
    due = st.next_due
    if loop is None or due is None or due > now:
        return
    # A fire came due while the run is in flight (cron only): coalesce.
    st.next_due = cron_next(loop.cron, zones(loop), now) if loop.cron else None
    result.changed = True
    if loop.overlap == "queue":
        st.pending = True
    elif loop.overlap == "skip":
        result.slot_skips.append((name, slots.skip(st, "overlap_skip", due, now,
                                                   run_id=run["run_id"])))
    elif loop.overlap == "replace":
        st.pending = True
        result.replace.append((name, run))


def _after_lost(loop: LoopDef | None, st: LoopState, run: dict[str, Any], now: float,
                zones: Zones) -> None:
    """A run whose supervisor died: record it and keep the schedule going."""
    st.last_end = now
    st.last_outcome = "lost"
    st.last_run_id = run["run_id"]
    st.outcomes = (st.outcomes + ["lost"])[-RECENT:]
    # A failure (DESIGN §5): an agent that kills its supervisor must not
    # escape --max-failures by doing it again and again.
    st.failures += 1
    if loop is not None:
        estimate = valves.charge(loop, st, "lost", None)
        if estimate is not None:
            run["cost_estimate"] = estimate  # for its record (engine/firing.record_lost)
    st.apply_control(now)
    if loop is not None and st.status == ACTIVE and valves.failure_limit_reached(loop, st):
        valves.pause_for(st, "failure_limit")
    if loop is not None and st.status == ACTIVE:
        st.next_due = next_fire(loop, zone=zones(loop), now=now, last_end=now,
                                   created=st.created, failures=st.failures)
        if st.triggered:  # a trigger during the lost run still asks for a fire
            st.next_due = now


def settle(loop: LoopDef, st: LoopState, result: RunResult, now: float, *,
           zone: tzinfo) -> Settled:
    """Fold a finished run into the loop's state; what its record adds."""
    run = st.run or {}
    tracked = st.next_due
    st.run = None
    st.last_end = result.ended_at
    st.last_outcome = result.outcome
    st.last_run_id = run.get("run_id")
    _count_outcome(st, result.outcome, now)
    if result.check is not None:
        st.last_check = verify.last_check(run.get("run_id") or "", result.check).to_json()
    _track_progress(loop, st, result)
    if result.session_id and not run.get("preset"):
        # A fallback preset's session is not the loop's agent's (DESIGN §18).
        st.session_id = result.session_id
    estimate = valves.charge(loop, st, result.outcome, result.cost_usd, result.tokens)
    settled = Settled()
    requested = _apply_decision(loop, st, result, now, settled)
    if estimate is not None:
        settled.cost_usd, settled.cost_estimated = estimate, True
        settled.add_note(f"no cost read: charged ${estimate:g}, the most this loop's runs "
                         "have cost" if not result.tokens else
                         f"tokens used but no cost read: charged ${estimate:g}, the most "
                         "this loop's runs have cost")
    st.apply_control(now)
    if st.status == ACTIVE:
        # The loop's own agent ran (not its fallback), and it has a fallback.
        fallback = bool(loop.fallback_agent) and not run.get("preset")
        settled.add_note(valves.after_run(loop, st, result, now, fallback))
    if st.status in TERMINAL:
        st.ended_at = st.ended_at or now
        st.next_due = None
    elif st.pending and st.status == ACTIVE:
        st.pending = False
        st.next_due = now
    elif loop.cron and tracked is not None:
        # Drivers kept the next slot up to date during the run. A slot that
        # passed unseen (no driver was running) is missed time: queue fires
        # it once now, skip and replace wait for the next one.
        st.pending = False
        if tracked > now:
            st.next_due = tracked
        else:
            st.next_due = now if loop.overlap == "queue" else cron_next(loop.cron, zone, now)
    else:
        st.pending = False
        st.next_due = next_fire(loop, zone=zone, now=now, last_end=result.ended_at,
                                   created=st.created, failures=st.failures,
                                   requested_delay=requested)
    return settled


def _track_progress(loop: LoopDef, st: LoopState, result: RunResult) -> None:
    """What --no-progress compares: the check's metric; under --until-check
    a red check's output; else an agent's result."""
    check = result.check
    if loop.check_metric and check is not None:
        # A rate-limited run is no run (its iteration is given back): its
        # unchanged metric must not use up --no-progress either.
        if result.outcome != "deferred":
            valves.record_digest(loop, st, verify.progress_key(check))
    elif loop.until_check and check is not None and not check.passed:
        if result.outcome == "ok":  # "not yet": the same red output again is no progress
            tail = check.output_tail + f" exit {check.exit_code}"
            valves.record_digest(loop, st, "check:" + valves.result_digest(tail))
    elif result.track_progress and result.outcome == "ok":
        valves.record_result(loop, st, result.result_text)


def _count_outcome(st: LoopState, outcome: str, now: float = 0.0) -> None:
    if outcome != "skipped":  # a gated loop's marks show its real runs
        st.outcomes = (st.outcomes + [outcome])[-RECENT:]
    else:  # its record is the run's own (outcome skipped)
        slots.skip(st, "gate_no_work", None, now)
    if outcome in ("failed", "timeout", "gate_error"):
        st.failures += 1
    elif outcome == "ok":
        st.failures = 0
    elif outcome in ("deferred", "skipped", "auth_error"):
        # A rate-limited run did no work, nor did one refused a login; a
        # gate found none: no run is used, and none of them is a failure.
        st.iterations = max(st.iterations - 1, 0)


def _apply_decision(loop: LoopDef, st: LoopState, result: RunResult, now: float,
                    settled: Settled) -> float | None:
    decision = result.decision
    if loop.until and result.result_text and loop.until in result.result_text:
        decision = decision or {"decision": "complete", "summary": f"found {loop.until!r}",
                                "evidence": "completion promise in the final result"}
    by_check = verify.by_check(loop, result.check, decision)
    decision = by_check.to_json() if by_check is not None else decision
    if not decision:
        if loop.auto and result.outcome == "ok":
            st.keepalive_misses += 1
            settled.note = "no decision: keepalive used"
            return float(loop.keepalive)
        return None
    st.keepalive_misses = 0
    last = {k: decision.get(k) for k in ("decision", "summary", "evidence")}
    if decision.get("source"):  # `check`: verified by --until-check
        last["source"] = decision["source"]
    st.last_decision = last
    kind = decision.get("decision")
    refused = verify.refusal(loop, result.check, kind)
    if refused:  # the loop stays active; the record and the loop say why
        settled.note = st.note = refused
        kind = "continue"
    if kind == "complete":
        st.end("completed", now)
    elif kind == "fail":
        st.end("failed", now)
    elif kind == "block":
        st.status, st.reason = PAUSED, "blocked"
    elif kind == "continue" and decision.get("next_delay_s") is not None:
        requested = float(decision["next_delay_s"])
        if not loop.auto:
            settled.note = "--next ignored: the loop has a fixed schedule"
            return None
        clamped, was_clamped = clamp_delay(loop, requested)
        if was_clamped:
            settled.note = f"requested delay {requested:g}s clamped to {clamped:g}s"
        settled.next_delay_s = clamped
        return clamped
    return None
