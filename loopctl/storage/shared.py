"""Where a home's loop state lives: state.json, or the team store's rows
(storage/pg/state.py) when the home has a store (DESIGN §21). Decided once
per Store, from what the Store has already read when it can: a home of
files pays no extra read and never imports psycopg or the store's modules
beyond the gate's cheap glance."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

    from loopctl.storage.pg.state import SharedState

ENV_STORE = "LOOPCTL_STORE"  # storage/pg/gate.ENV_STORE, without importing it


def may_be_shared(source: bytes | None) -> bool:
    """False only when loops.yaml's bytes (`source`, None: no file) and the
    environment rule out a store."""
    if os.environ.get(ENV_STORE, "").strip():
        return True
    return source is not None and b"store" in source


def shared_state(store: Any) -> SharedState | None:
    """The team store's state for `store`'s home; None: state.json."""
    from loopctl.storage.pg.dsn import chosen, machine

    dsn = chosen(store.read_defs().top.get("store"), str(store.paths.loops_file))
    if not dsn:
        return None
    from loopctl.storage.pg.state import SharedState

    return SharedState(dsn, machine())


def read_state(shared: SharedState, in_lock: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The state as Store.read_state returns it, and its repairs, from the
    store's rows; under the store lock, in the lock's transaction. Every
    entry passes the checks state.json's do (the rows are untrusted)."""
    from loopctl.domain.state import repair_all, unpack
    from loopctl.storage.statefile import STATE_VERSION

    if in_lock:
        shared.begin()
    top, rows = shared.read()
    loops, repairs = repair_all({name: unpack(entry) for name, entry in rows.items()})
    return {**top, "version": STATE_VERSION, "loops": loops}, repairs


def write_entries(shared: SharedState, state: dict[str, Any]) -> None:
    """Each entry packed as state.json holds it; the refs of a run tagged
    with its machine and run, so that every machine knows whose pids they are."""
    from loopctl.domain.state import in_flight, wake_time
    from loopctl.storage.statefile import top_of

    for st in state["loops"].values():
        tag_refs(st.run)
    # The team's next wake, as summarize computes summary.json's (not
    # summarize itself: these keys are not the state's in a store home).
    wakes = [w for st in state["loops"].values() if (w := wake_time(st)) is not None]
    shared.write(top_of(state),
                 {name: st.to_json() for name, st in state["loops"].items()},
                 (min(wakes) if wakes else None, in_flight(state)))


def tag_refs(run: dict[str, Any] | None) -> None:
    """A run's supervisor and agent refs carry the run's machine and id
    (an orphaned agent keeps them: it is the same ref)."""
    if not run or not run.get("machine"):
        return
    for key in ("supervisor", "agent"):
        ref = run.get(key)
        if isinstance(ref, dict) and "machine" not in ref:
            ref["machine"], ref["run"] = run["machine"], run["run_id"]
