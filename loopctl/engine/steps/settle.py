"""Step 6: write the run record, settle the loop, tell a human, prune."""

from __future__ import annotations

import time

from loopctl import clock
from loopctl.domain.errors import LoopctlError
from loopctl.domain.lifecycle import settle as settle_loop
from loopctl.domain.model import LoopDef
from loopctl.domain.reason import run_reason
from loopctl.domain.run_record import RunRecord
from loopctl.domain.state import LoopState, RunResult, entries_of
from loopctl.domain.timestamps import iso
from loopctl.engine import events, run_accounts
from loopctl.engine.run_context import Claim, Done, Guarded, Launched, RunContext, add_note
from loopctl.storage.runs import count_run, prune, remember

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

    from loopctl.integrations.delivery import Handoff

SAVE_ATTEMPTS = 3  # a full disk may free up; waits 1 s, then 2 s


def run_record(ctx: RunContext, claim: Claim, launched: Launched | None, result: RunResult,
               done: Done, handoff: Handoff | None) -> RunRecord:
    run = claim.run
    record = RunRecord.new(
        ctx.run_id, ctx.name,
        iteration=run["iteration"], trigger=run.get("trigger"), slot=run.get("slot"),
        due_at=iso(run["due_at"]), started_at=iso(result.started_at),
        ended_at=iso(result.ended_at),
        duration_s=round(result.ended_at - result.started_at, 3),
        exit_code=result.exit_code, outcome=result.outcome,
        missed=run.get("missed", 0), decision=result.decision,
        session_id=result.session_id, cost_usd=result.cost_usd,
        result=result.result_text[-2000:] if result.result_text else None,
        log=str(ctx.log_path), argv=launched.argv if launched else [], note=result.note,
        log_truncated=ctx.bounds.truncated, sandbox=launched.sandbox if launched else "off",
    )
    if done.gate is not None:
        record.add(gate=done.gate.record())
    if result.check is not None:
        record.add(check=result.check)
    if done.pr_fix is not None:
        record.add(pr_feedback=done.pr_fix.record())
    if done.guarded is not None and done.guarded.changed:
        from loopctl.domain.protect import record_fields

        found = record_fields(done.guarded.changed)
        record.add(protected=found.protected)
        if found.count is not None:
            record.add(protected_count=found.count)
    if run.get("spec", {}).get("agent"):  # which preset ran (a fallback's, DESIGN §18)
        record.add(agent=run["spec"]["agent"],
                   fallback_from=run.get("fallback_from"))
    if run.get("triggers"):
        record.add(triggers=run["triggers"])
    if run.get("machine"):  # which machine of a team store ran it (DESIGN §21)
        record.add(machine=run["machine"])
    if run.get("queued_s") is not None:
        record.add(queued_s=run["queued_s"])
    return record.add(**handoff.record()) if handoff is not None else record


def settle(ctx: RunContext, claim: Claim, result: RunResult, record: RunRecord,
           done: Done, handoff: Handoff | None) -> RunRecord:
    """Save with a few retries (a full disk may free up), then prune."""
    for attempt in range(SAVE_ATTEMPTS):
        try:
            save(ctx, claim, result, record, done, handoff)
            from loopctl.storage.run_files import drop_fault

            drop_fault(ctx.store.paths, ctx.name, ctx.run_id)  # settled: nothing to say
            break
        except LoopctlError as exc:
            if attempt + 1 < SAVE_ATTEMPTS:
                time.sleep(2 ** attempt)
                continue
            if _store_unreachable(ctx, exc):
                keep_record(ctx, record)
            else:
                mark_unsaved(ctx, exc.message)
            raise
    return record


def _store_unreachable(ctx: RunContext, exc: LoopctlError) -> bool:
    """The team store, not this machine's disk, refused the save."""
    if ctx.store.shared() is None:
        return False
    from loopctl.storage.pg.connect import StoreUnreachable

    return isinstance(exc, StoreUnreachable)


def keep_record(ctx: RunContext, record: RunRecord) -> None:
    """The run's record, kept here while the team store cannot take the
    state (DESIGN §21): the run stays in flight there until a driver finds
    its claim stale or its supervisor gone, and records it from this file
    (firing.record_lost reads a record the supervisor wrote)."""
    from loopctl.storage.team_outbox import note_record

    try:
        ctx.store.write_json(ctx.store.paths.run_record(ctx.name, ctx.run_id), record.to_json())
        note_record(ctx.store.paths, ctx.name, ctx.run_id)  # owed to the team's views
    except LoopctlError:
        pass  # the driver that finds the run lost writes one


def save(ctx: RunContext, claim: Claim, result: RunResult, record: RunRecord,
         done: Done, handoff: Handoff | None) -> set[str]:
    """Record the run and settle the loop, under the store lock."""
    store, paths = ctx.store, ctx.store.paths
    loop, run = claim.loop, claim.run
    pending: events.Pending = []
    with store.lock():
        state = store.read_state()
        st = entries_of(state).get(ctx.name)
        if st and st.run and st.run["run_id"] == ctx.run_id:
            before = events.status_key(st)
            now = clock.now()
            settled = settle_loop(loop, st, result, now, zone=clock.zone_of(loop))
            told, instead = run_accounts.after_run(ctx, state, loop, result, now,
                                              run.get("fallback_from"))
            if instead:
                before = events.status_key(st)  # the account's one event says it
            if settled.note:
                add_note(result, settled.note)
                record.add(note=result.note)
            record.add(**settled.to_json(), status_after=st.status)
            count_run(paths, ctx.name, st, record)  # in this write: counters never go back
            if ctx.dropped:
                st.note = f"run {ctx.run_id}: {'; '.join(ctx.dropped)}"[:2000]
            store.write_json(paths.run_record(ctx.name, ctx.run_id), record.to_json())
            remember(paths, ctx.name, ctx.run_id, skipped=result.outcome == "skipped")
            pending = _attention(ctx, loop, st, run, before, now, done, handoff,
                                 run_reason(record))
            if told is not None:
                pending.insert(0, (told, {"hook": run.get("hook"),
                                          "notify": run.get("notify") or []}))
            events.publish(store, pending)
            store.write_state(state)
        elif st is not None:
            # Recorded lost meanwhile: keep what really happened. A loop
            # removed meanwhile (`rm`) gets no run files back.
            store.write_json(paths.run_record(ctx.name, ctx.run_id), record.to_json())
            remember(paths, ctx.name, ctx.run_id)
        in_flight = {st.run["run_id"]} if st and st.run else set()
        if st is not None:  # under the lock: the index and the files agree
            prune(paths, ctx.name, loop.keep_runs, in_flight)
    events.dispatch(store, pending)
    from loopctl.engine.team_publish import publish_pending  # DESIGN §21: the team's copy

    publish_pending(store)  # after the lock: the store may be slow or down
    return in_flight


def _attention(ctx: RunContext, loop: LoopDef, st: LoopState, run: dict[str, Any],
               before: Any, now: float, done: Done,
               handoff: Handoff | None, why: str | None) -> events.Pending:
    pending: events.Pending = []
    receivers = {"hook": run.get("hook"), "notify": run.get("notify") or []}
    log = str(ctx.log_path)
    if events.needs_attention(before, events.status_key(st)):
        pending.append((events.attention(loop, st, ctx.run_id, log, now, why), receivers))
    if handoff is not None:
        st.last_handoff = events.handoff_summary(handoff.record()).to_json()
        failed = events.handoff_event(loop, st, ctx.run_id, log, now, handoff)
        if failed:
            pending.append((failed, receivers))
    tried = protected_event(ctx, done.guarded, loop, st, log, now)
    if tried is not None:
        pending.append((tried, receivers))
    if done.pr_fix is None and not st.pr_feedback and handoff is None:
        return pending  # no PR to track: most runs import no git code
    from loopctl.engine import pr_fix

    review = pr_fix.settle(done.pr_fix, st, handoff)
    if review is not None:
        event = events.handoff_event(loop, st, ctx.run_id, log, now, review)
        pending.extend([(event, receivers)] if event else [])
    return pending


def protected_event(ctx: RunContext, guarded: Guarded | None, loop: LoopDef, st: LoopState,
                    log: str, now: float) -> events.ProtectedEvent | None:
    """One `protected_changed` attention event for a run that tried."""
    if guarded is None or not guarded.changed:
        return None
    from loopctl.domain import protect as rules
    from loopctl.domain.untrusted import line

    text = rules.event_text(guarded.changed)
    told = events.attention(loop, st, ctx.run_id, log, now).told(
        "protected_changed", f"{loop.name}: protected changed: {text}", text)
    return told.grown(events.ProtectedEvent,
                      protected=[line(p) for p in guarded.changed[:rules.RECORDED]])


def mark_unsaved(ctx: RunContext, message: str) -> None:
    """This loop's state could not be saved, so the next driver must pause
    it (`error`) rather than keep firing: a marker tells it."""
    from loopctl.storage.run_files import mark_unsaved as leave_marker

    leave_marker(ctx.store.paths, ctx.name, ctx.run_id, message)
