"""The team store's say in a fire (DESIGN §21): after `lifecycle.plan` has
claimed runs in this machine's state, and before any supervisor starts,
each claim is taken in the store too. A fire the store refuses (its slot
ran on another machine, or this machine's definition differs) is undone
here and never launched. With the store unreachable the pass raises: its
state is not written and nothing fires."""

from __future__ import annotations

import os

from loopctl import clock
from loopctl.domain import slots
from loopctl.domain.team import definition_digest, give_way, machines_of, runs_on
from loopctl.storage.definitions import Definitions
from loopctl.storage.pg.gate import ENV_STORE
from loopctl.storage.store import Store

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

    from loopctl.domain.skipped import SkippedSlot


def team_set(defs: Definitions) -> bool:
    """Cheap: whether this home has a store (no psycopg, no connection)."""
    return bool(os.environ.get(ENV_STORE, "").strip() or defs.top.get("store"))


def claim_fires(store: Store, defs: Definitions, state: dict[str, Any],
                fired: list[tuple[str, dict[str, Any]]], now: float,
                before: dict[str, Any] | None = None,
                ) -> tuple[list[tuple[str, dict[str, Any]]], list[tuple[str, str]],
                           list[tuple[str, SkippedSlot]]]:
    """The fires the store granted; (loop, why) of those it refused; the
    skipped-slot records of those refused for their definition.

    `before`: the entries as they were before the pass claimed (state
    shared in the store). A fire refused because the loop is not this
    machine's to run (its `machines:`, or its definition here differs)
    puts the entry back as it was: the team's state must not say its slot
    was taken or skipped, or the machine whose loop it is would not run it.
    The skip is still on record here (`history --skipped`)."""
    granted: list[tuple[str, dict[str, Any]]] = []
    refused: list[tuple[str, str]] = []
    skips: list[tuple[str, SkippedSlot]] = []
    conn, machine, own = _connection(store, defs)
    try:
        for name, run in fired:
            verdict = _claim(conn, machine, name, run, defs)
            if verdict.refusal is None:
                run["machine"] = machine
                granted.append((name, run))
                continue
            loop = defs.loops[name]
            st = state["loops"][name]
            instant = give_way(loop, st, now, clock.zone_of(loop), verdict.taken_by)
            slot = str(run.get("slot"))
            refused.append((name, f"slot {slot.partition(':')[2]} {verdict.refusal}"
                            if verdict.refusal.startswith("already ran") else verdict.refusal))
            if instant is not None:
                entry = slots.skip(st, "definition_differs", instant, now, machine=machine)
                skips.append((name, entry))
            if before is not None and name in before \
                    and not verdict.refusal.startswith("already ran"):
                state["loops"][name] = before[name]
    finally:
        if own:
            conn.close()
    return granted, refused, skips


def _claim(conn: Any, machine: str, name: str, run: dict[str, Any],
           defs: Definitions) -> Any:
    """The store's verdict; a connection lost mid-way (a server restarted,
    a cut link) is the store being unreachable: the pass fails, unwritten."""
    from loopctl.storage.pg.claims import Verdict, claim
    from loopctl.storage.pg.connect import StoreUnreachable, driver, first_line

    loop = defs.loops[name]
    if not runs_on(loop, machine):  # before the store: the slot stays free for them
        globs = ", ".join(machines_of(loop))
        return Verdict(f"not for machine {machine} (machines: {globs})",
                       f"left to machines {globs}")
    slot = str(run.get("slot") or "")
    # A scheduled slot is the team's; any other fire (a manual run, a
    # trigger) gets a claim of its own, whose heartbeat tells every machine
    # whether the run is alive (engine/team_state.py).
    shared = slot if slot.startswith("schedule:") else f"run:{run['run_id']}"
    try:
        return claim(conn, name, shared, str(run["run_id"]), machine,
                     definition_digest(defs.loops[name]))
    except driver().Error as exc:
        raise StoreUnreachable(f"store is unreachable: {first_line(exc)}") from None


def _connection(store: Store, defs: Definitions) -> tuple[Any, str, bool]:
    """The connection to claim on, its machine, and whether it is ours to
    close: the state's transaction when the pass holds it, so the claims
    and the state that records them commit together or not at all."""
    from loopctl.storage.pg.dsn import chosen
    from loopctl.storage.pg.team import TeamStore

    shared = store.shared()
    if shared is not None:  # its transaction's, else its (the process's one) connection
        return shared.transaction_conn() or shared._connection(), shared.machine, False

    dsn = chosen(defs.top.get("store"), str(store.paths.loops_file))
    assert dsn is not None  # team_set said so
    team = TeamStore(dsn)
    return team.open_checked(), team.machine, True
