"""`ls` and `status NAME` at 10,000 loops, read without building them all.

The full read (commands/common.snapshot) decodes every cached definition
into a LoopDef, unpacks every state entry and reconciles them all, which at
10,000 loops costs several times what starting the interpreter does. The
sealed definitions cache carries a row per loop with what `ls` shows
(defs_cache.row) and a line per loop (`status NAME` decodes one), and a
state.json loopctl wrote as it is needs no repair: these paths read those.

They answer only when the answer is the full read's, byte for byte, and
otherwise return None for the caller to take the full read: no usable
cache (a hand edit since, or notification URLs, which never leave
loops.yaml), a state.json that needs a repair, an account marked (held
loops), or an entry that reconciling would change (lifecycle.reconcile:
its schedule or `for` edited, or armed nowhere). Reads, never writes.
"""

from __future__ import annotations

from typing import Any

from loopctl import clock
from loopctl.domain.state import ACTIVE, common_values, display_status
from loopctl.storage import defs_cache
from loopctl.storage.store import Store

Row = tuple[Any, ...]  # defs_cache.ROW_KEYS: name, text, key, limit, for, created, after, cron, tz


def brief(store: Store, last_reason: Any) -> list[dict[str, Any]] | None:
    """What `views.list_brief` gives, or None. `last_reason`: its function
    of (store, name, state entry), asked only of loops that have run."""
    parts = store.cached_parts()
    columns = defs_cache.rows(parts[1]) if parts else None
    if parts is None or columns is None:
        return None
    state = store.read_state_packed()
    if state is None or state.get("accounts"):
        return None
    head, now, entries = parts[0], clock.now(), state["loops"]
    invalid, by_name = head["invalid"], {row[0]: row for row in zip(*columns)}
    iterations = common_values()["iterations"]
    out: list[dict[str, Any]] = []
    for name in head["names"]:
        row = by_name.get(name)
        st = entries.get(name)
        if name in invalid:
            out.append({"name": name, "status": "invalid", "error": invalid[name]})
        elif row is None:
            return None
        elif st is None:  # never driven: the entry reconciling would make
            out.append({"name": name, "status": ACTIVE, "reason": None, "schedule": row[1],
                        "used": 0, "limit": row[3], "next_fire": _first_due(row, now),
                        "last_outcome": None, "last_reason": None})
        elif not _settled(st, row):
            return None
        else:
            ran = st.get("last_run_id")
            out.append({
                "name": name, "status": display_status(st), "reason": st.get("reason"),
                "schedule": row[1], "used": st.get("iterations", iterations), "limit": row[3],
                "next_fire": st["next_due"] if st["status"] == ACTIVE else None,
                "last_outcome": st.get("last_outcome") if ran else None,
                "last_reason": last_reason(store, name, st) if ran else None,
            })
    return out


def _settled(st: dict[str, Any], row: Row) -> bool:
    """Reconciling leaves this entry as it is (lifecycle.reconcile, check
    for check)."""
    created = st.get("created")
    if created is None or st.get("schedule_key") != row[2] or "status" not in st:
        return False
    if st["status"] == ACTIVE and not st.get("run") and st.get("next_due") is None \
            and row[2] != "on_demand":
        return False
    return bool(st.get("deadline") == created + row[4])


def _first_due(row: Row, now: float) -> float | None:
    """domain.schedule.first_fire of the row's loop, created as
    state.new_loop_state creates it."""
    created = now if row[5] is None else row[5]
    if row[2] == "on_demand":
        return None
    if row[7] is None:
        return created + (row[6] or 0)  # type: ignore[no-any-return]
    from loopctl.domain.schedule import first_fire

    loop = defs_cache.build({"name": row[0], "cron": row[7], "tz": row[8], "after": row[6]})
    return first_fire(loop, created, zone=clock.zone_of(loop))


def one(store: Store, name: str) -> tuple[Any, dict[str, Any], dict[str, Any], float] | None:
    """For `status NAME`: the loop (None: invalid), the invalid entries, the
    state holding its reconciled entry alone, and now; None: read it all."""
    from loopctl.domain import lifecycle
    from loopctl.domain.state import unpack

    parts = store.cached_parts()
    if parts is None or name not in parts[0]["names"]:
        return None
    invalid = parts[0]["invalid"]
    loop = None if name in invalid else defs_cache.one(parts[2], name)
    if loop is None and name not in invalid:
        return None
    state = store.read_state_packed()
    if state is None or state.get("accounts"):
        return None
    now, entry = clock.now(), state["loops"].get(name)
    state["loops"] = {} if entry is None else {name: unpack(entry)}
    lifecycle.reconcile({name: loop} if loop else {}, invalid, state, now, clock.zone_of)
    return loop, invalid, state, now
