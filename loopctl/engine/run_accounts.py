"""Under the store lock with the loop settled (steps/settle.py): what the run
found out about its account (DESIGN §18).

A usage limit or a refused login marks the account in state.json and holds
every other idle loop of it (paused `rate_limited` until the reset, or
`auth_required`), with one attention event per account and reset naming
them. A run of a marked account that succeeds lifts the mark and lets the
loops it held go again.
"""

from __future__ import annotations

from loopctl.domain import accounts
from loopctl.domain.agent_cli import is_agent
from loopctl.domain.model import LoopDef
from loopctl.domain.state import ACTIVE, PAUSED, LoopState, RunResult, entries_of
from loopctl.domain.timestamps import iso
from loopctl.domain.untrusted import line
from loopctl.engine import events
from loopctl.engine.accounts import Ids, table_of
from loopctl.engine.run_context import RunContext

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

KIND_FOR_OUTCOME = {"deferred": accounts.RATE_LIMITED, "auth_error": accounts.AUTH_REQUIRED}


def after_run(ctx: RunContext, state: dict[str, Any], loop: LoopDef, result: RunResult,
              now: float, fallback_from: str | None = None
              ) -> tuple[events.AccountEvent | None, bool]:
    """The account event to send, if any, and whether it stands in for the
    loop's own event (it always does when the account was marked). `loop`
    is what ran: for a fallback's run, the fallback preset."""
    if not is_agent(loop) or result.loop_only:
        return None, False  # only the CLI's own fields hold an account (§18)
    kind = KIND_FOR_OUTCOME.get(result.outcome)
    table = table_of(state, now)
    # The agent's own success releases its account, whatever its check said.
    if kind is None and (result.outcome != "ok" and not result.check_failed or not table):
        return None, False  # the cheap way out of nearly every run
    ids = Ids(ctx.store)
    account = ids.of(loop)
    if kind is None:
        _release(state, table, account, now)
        return None, False
    from loopctl.agents.presets import PRESETS

    st = entries_of(state)[ctx.name]
    preset = loop.agent or "shell"
    src = accounts.source(preset, PRESETS[preset].api_key_env)
    marked = accounts.mark(
        table, account, kind, preset=preset, loop=ctx.name, run_id=ctx.run_id,
        until=st.resume_at if kind == accounts.RATE_LIMITED else None,
        error=line(result.note or "")[:300], fix=src.fix, now=now)
    state["accounts"] = table
    if st.status == PAUSED and st.reason == kind:
        st.note = accounts.hold_note(marked.entry)
        if fallback_from:
            _both_held(ctx, st, ids, table, marked.entry, now)
    elif st.status == ACTIVE and loop.fallback_agent:
        st.note = (f"{accounts.hold_note(marked.entry)}; meanwhile its fires run "
                   f"{loop.fallback_agent}")
    _hold_others(ctx, state, ids, account, preset, marked.entry)
    # Paused for a reason of its own (deferral_limit, budget_limit, ...):
    # the loop's own event says that too.
    instead = st.status == ACTIVE or st.reason == kind
    if not marked.new:
        return None, instead
    return account_event(loop, st, ctx.run_id, str(ctx.log_path), marked.entry, now), instead


def _both_held(ctx: RunContext, st: LoopState, ids: Ids, table: accounts.Table,
               entry: accounts.AccountMark, now: float) -> None:
    """The fallback hit a limit of its own while the loop's agent is held:
    the loop waits for the first of the two to free, and says both."""
    own = ctx.store.read_defs().loops.get(ctx.name)
    primary = table.get(ids.of(own)) if own is not None else None
    if primary is not None and accounts.holding(primary, now) and primary is not entry:
        accounts.hold(st, primary, ctx.name, entry)


def _hold_others(ctx: RunContext, state: dict[str, Any], ids: Ids, account: str,
                 preset: str, entry: accounts.AccountMark) -> None:
    """Idle loops of the same account wait too; a run in flight finds out
    by itself. Their fallback, if any, takes their next fires."""
    defs = ctx.store.read_defs()
    for name, other in defs.loops.items():
        st = entries_of(state).get(name)
        if name == ctx.name or st is None or st.status != ACTIVE or st.run \
                or other.agent != preset or other.command or other.fallback_agent:
            continue
        if ids.of(other) == account:
            accounts.hold(st, entry, name)


def _release(state: dict[str, Any], table: accounts.Table, account: str,
             now: float) -> None:
    entry = table.get(account)
    if entry is None:
        return
    for name in accounts.release(table, account):
        st = entries_of(state).get(name)
        if st is not None and st.status == PAUSED and st.reason == entry.kind \
                and not st.run:
            st.status, st.reason, st.resume_at, st.note = ACTIVE, None, None, None
            if st.next_due is None or st.next_due < now:
                st.next_due = now


def account_event(loop: LoopDef, st: LoopState, run_id: str, log: str,
                  entry: accounts.AccountMark,
                  now: float) -> events.AccountEvent:
    """One event for the account: the loops it holds, the reset or the fix."""
    names = ", ".join(entry.loops)
    if entry.kind == accounts.AUTH_REQUIRED:
        summary = f"the {entry.preset} account needs a login: {entry.fix}"
    else:
        summary = f"the {entry.preset} account is rate-limited until {iso(entry.until)}"
    text = f"{summary}; held: {names}" + (f"; {entry.error}" if entry.error else "")
    told = events.attention(loop, st, run_id, log, now).told(
        entry.kind, line(f"{summary} (loops: {names})"), line(text))
    held = events.HeldAccount(
        preset=entry.preset, kind=entry.kind, until=iso(entry.until),
        loops=list(entry.loops),
        fix=entry.fix if entry.kind == accounts.AUTH_REQUIRED else None)
    return told.grown(events.AccountEvent, account=held)
