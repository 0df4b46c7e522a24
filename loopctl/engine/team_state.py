"""Runs of other machines in the shared state (DESIGN §21 "Liveness and
fencing"). A pid recorded on another machine means nothing here (pid
namespaces collide), so a foreign run is never signalled, swept or judged
by pid: it is alive while its claim's heartbeat is, and its agent with it.
Its supervisor renews the claim every LOOPCTL_STORE_RENEW seconds; a claim
not renewed for LOOPCTL_STORE_STALE, or found lost, is dead. The store's
clock judges (now() - renewed_at), so machines' clocks need not agree.

Recording a stale run `lost` is a state transition under the shared lock:
the first driver to see it writes it, marks the claim lost in the same
transaction (so a supervisor that comes back cannot renew it and its fence
kills the agent), and every later driver finds the run gone."""

from __future__ import annotations

from loopctl.engine import procs
from loopctl.settings import knob
from loopctl.storage.store import Store

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from loopctl.domain.state import LoopState

    Alive = Callable[[dict[str, Any] | None], bool]


def alive_for(store: Store, state: dict[str, Any]) -> Alive:
    """The liveness callable for `lifecycle.plan` and the cap's count:
    procs.alive for this machine's processes, the claim for another's."""
    shared = store.shared()
    if shared is None:
        return procs.alive
    me = shared.machine
    refs = [ref for st in state["loops"].values() for ref in _refs(st)]
    foreign = {ref["run"] for ref in refs if _machine(ref) not in (None, me)}
    live = _live_claims(shared, sorted(foreign)) if foreign else set()

    def alive(ref: dict[str, Any] | None) -> bool:
        machine = _machine(ref)
        if ref is None or machine in (None, me):
            return procs.alive(ref)
        return ref.get("run") in live

    return alive


def shared_entries(store: Store, state: dict[str, Any]) -> dict[str, LoopState] | None:
    """A copy of the entries before a pass claims, when they are the team's
    (team_claims.claim_fires puts back those it must not change)."""
    if store.shared() is None:
        return None
    import copy

    return copy.deepcopy(state["loops"])


def foreign_machine(store: Store, run: dict[str, Any]) -> str | None:
    """The machine a run belongs to when it is not this one's; else None."""
    machine = run.get("machine")
    if not machine:
        return None
    shared = store.shared()
    return str(machine) if shared is not None and machine != shared.machine else None


def local_machine(run: dict[str, Any]) -> str | None:
    """This machine's name when `run` was claimed on a team store (None:
    a home of files, where every pid is local)."""
    if not run.get("machine"):
        return None
    from loopctl.storage.pg.dsn import machine

    return machine()


def mark_lost(store: Store, loop: str, run_id: str) -> None:
    """The claim of a run recorded lost: never renewed again (team_fence
    kills the agent of a supervisor that finds it so)."""
    shared = store.shared()
    conn = shared.transaction_conn() if shared is not None else None
    if conn is None:
        return
    from loopctl.storage.pg.schema import SCHEMA

    shared._run(conn, f"UPDATE {SCHEMA}.slot_claims SET lost_at = now() "
                "WHERE loop = %s AND run_id = %s AND lost_at IS NULL", (loop, run_id))


def ask_to_kill(store: Store, loop: str, run: dict[str, Any]) -> str | None:
    """`stop --kill` of another machine's run: its pids mean nothing here,
    so the kill is asked on its claim, in the lock's transaction, and its
    supervisor's fence acts at its next renewal (team_fence.py). What was
    done, truthfully; None for this machine's run (signal it)."""
    machine = foreign_machine(store, run)
    shared = store.shared()
    if machine is None or shared is None:
        return None
    from loopctl.storage.pg.claims import request_kill
    from loopctl.storage.pg.connect import driver

    conn = shared.transaction_conn() or shared._connection()
    shown, run_id = _printable(machine), _printable(str(run["run_id"]))
    try:
        asked = request_kill(conn, loop, str(run["run_id"]), shared.machine,
                             knob("LOOPCTL_STORE_STALE"))
    except driver().Error as exc:
        raise shared._failed(exc) from None
    if not asked:
        return (f"run {run_id} on machine {shown} no longer renews its claim: the next "
                "driver pass records it lost (its fence kills the agent there)")
    return (f"asked machine {shown} to kill run {run_id}; it acts within "
            f"{knob('LOOPCTL_STORE_RENEW'):g}s")


def _printable(text: str) -> str:
    """Text from the store, for a message: bounded, printable."""
    return "".join(c for c in text[:100] if c.isprintable()) or "?"


def _refs(st: LoopState) -> list[dict[str, Any]]:
    run = st.run or {}
    found = [run.get("supervisor"), run.get("agent"), st.orphan]
    return [ref for ref in found if isinstance(ref, dict) and ref.get("run")]


def _machine(ref: dict[str, Any] | None) -> str | None:
    return ref.get("machine") if isinstance(ref, dict) else None


def _live_claims(shared: Any, run_ids: list[str]) -> set[str]:
    """Of `run_ids`, those whose claim is renewed within the stale window."""
    from loopctl.storage.pg.schema import SCHEMA

    conn = shared.transaction_conn()
    if conn is None:
        conn = shared._connection()
    rows = shared._run(
        conn, f"SELECT run_id FROM {SCHEMA}.slot_claims WHERE run_id = ANY(%s) "
        "AND lost_at IS NULL AND renewed_at > clock_timestamp() - make_interval(secs => %s)",
        (run_ids, knob("LOOPCTL_STORE_STALE"))).fetchall()
    return {str(row[0]) for row in rows}
