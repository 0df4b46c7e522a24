"""`ls`, `ls --json` and `status NAME` at 10,000 loops, read without
building them all.

The full read (commands/common.snapshot) decodes every cached definition
into a LoopDef, unpacks every state entry and reconciles them all, which at
10,000 loops costs several times what starting the interpreter does. The
sealed definitions cache carries a row per loop with what `ls` shows
(defs_cache.row), a column per definition field the LOOP object shows
(defs_cache.LISTED) and a line per loop (`status NAME` decodes one), and a
state.json loopctl wrote as it is needs no repair: these paths read those.

They answer only when the answer is the full read's, byte for byte, and
otherwise return None for the caller to take the full read: no usable
cache (a hand edit since, or notification URLs, which never leave
loops.yaml), a state.json that needs a repair, an account marked (held
loops), or an entry that reconciling would change (lifecycle.reconcile:
its schedule or `for` edited, or armed nowhere). Reads, never writes.
"""

from __future__ import annotations

from itertools import compress, count, repeat
from operator import add, is_, is_not
from typing import Any

from loopctl import clock
from loopctl.domain.state import ACTIVE, common_values
from loopctl.storage import defs_cache
from loopctl.storage.store import Store

Row = list[Any]  # defs_cache.ROW_KEYS: name, text, key, limit, for, created, after, cron, tz


def brief(store: Store, last_reason: Any) -> list[dict[str, Any]] | None:
    """What `views.list_brief` gives, or None. `last_reason`: its function
    of (store, name, state entry), asked only of loops that have run. A
    field at a time, each read from every entry in one `map` (C), with a
    Python step only for the entries that need one (running, queued, new)."""
    parts = store.cached_parts()
    columns = defs_cache.rows(parts.rows) if parts else None
    if parts is None or columns is None:
        return None
    state = store.read_state_packed()
    if state is None or state.get("accounts"):
        return None
    head, entries = parts.head, state["loops"]
    names, invalid = head["names"], head["invalid"]
    if columns[0] != [name for name in names if name not in invalid]:
        return None
    valid = _valid(store, columns, entries, clock.now(), last_reason)
    if valid is None:
        return None
    if not invalid:
        return valid
    shown = iter(valid)
    return [{"name": name, "status": "invalid", "error": invalid[name]} if name in invalid
            else next(shown) for name in names]


def _valid(store: Store, columns: list[list[Any]], entries: dict[str, Any], now: float,
           last_reason: Any) -> list[dict[str, Any]] | None:
    names = columns[0]
    sts: list[Any] = list(map(entries.get, names))
    new = _where(map(is_, sts, repeat(None)))
    for at, entry in zip(new, _new_entries(columns, new, now), strict=True):
        sts[at] = entry
    field = _fields(sts)
    status = field("status")
    if not _settled(field, columns) or None in status:
        return None
    shown = list(status)
    for at in _where(field("run")):
        shown[at] = "running"
    for at in _where(map(is_not, field("queued_at"), repeat(None))):
        if shown[at] == ACTIVE:
            shown[at] = "queued"
    outcome: list[Any] = [None] * len(names)
    reasons: list[Any] = [None] * len(names)
    for at in _where(field("last_run_id")):
        outcome[at] = sts[at].get("last_outcome")
        reasons[at] = last_reason(store, names[at], sts[at])
    nxt = [due if kind == ACTIVE else None
           for due, kind in zip(field("next_due"), status, strict=True)]
    used = field("iterations", common_values()["iterations"])
    return [{"name": a, "status": b, "reason": c, "schedule": d, "used": e, "limit": f,
             "next_fire": g, "last_outcome": h, "last_reason": i, "last_end": j}  # presized
            for a, b, c, d, e, f, g, h, i, j in zip(
                names, shown, field("reason"), columns[1], used, columns[3], nxt, outcome,
                reasons, field("last_end"), strict=True)]


def _new_entries(columns: list[list[Any]], new: list[int], now: float) -> list[dict[str, Any]]:
    """What state.new_loop_state gives the loops at `new` (never driven), in
    the fields read here (the rest are the common values: no run, no
    outcome), a field at a time: a hand-written file of 10,000 loops."""
    if not new:
        return []
    rows = [[column[at] for at in new] for column in columns]
    created = [now if at is None else at for at in rows[5]]
    due = list(map(add, created, [after or 0 for after in rows[6]]))
    for at, key in enumerate(rows[2]):
        if key == "on_demand" or rows[7][at] is not None:
            due[at] = _first_due([row[at] for row in rows], created[at])
    return [{"status": ACTIVE, "created": a, "deadline": b, "schedule_key": c, "next_due": d}
            for a, b, c, d in zip(created, map(add, created, rows[4]), rows[2], due,
                                  strict=True)]


def _fields(sts: list[dict[str, Any]]) -> Any:
    """`field(key, default)`: that field of every entry, read once."""
    read: dict[str, list[Any]] = {}

    def field(key: str, default: Any = None) -> list[Any]:
        if key not in read:
            read[key] = list(map(dict.get, sts, repeat(key), repeat(default)))
        return read[key]

    return field


def _where(truth: Any) -> list[int]:
    return list(compress(count(), truth))


def _settled(field: Any, columns: list[list[Any]]) -> bool:
    """Reconciling leaves every entry as it is (lifecycle.reconcile, check
    for check)."""
    created = field("created")
    if field("schedule_key") != columns[2] or None in created \
            or list(map(add, created, columns[4])) != field("deadline"):
        return False
    status, run, keys = field("status"), field("run"), columns[2]
    return not any(status[at] == ACTIVE and not run[at] and keys[at] != "on_demand"
                   for at in _where(map(is_, field("next_due"), repeat(None))))


def _first_due(row: Row, created: float) -> float | None:
    """domain.schedule.first_fire of the row's loop."""
    if row[2] == "on_demand":
        return None
    if row[7] is None:
        return created + (row[6] or 0)
    from loopctl.domain.schedule import first_fire

    loop = defs_cache.build({"name": row[0], "cron": row[7], "tz": row[8], "after": row[6]})
    return first_fire(loop, created, zone=clock.zone_of(loop))


def one(store: Store, name: str) -> tuple[Any, dict[str, Any], dict[str, Any], float] | None:
    """For `status NAME`: the loop (None: invalid), the invalid entries, the
    state holding its reconciled entry alone, and now; None: read it all."""
    from loopctl.domain import lifecycle

    parts = store.cached_parts()
    if parts is None or name not in parts.head["names"]:
        return None
    invalid = parts.head["invalid"]
    loop = None if name in invalid else defs_cache.one(parts.loops, name)
    if loop is None and name not in invalid:
        return None
    found = store.read_entry(name)
    if found is None or found[0].get("accounts"):
        return None
    state, entry = found
    now = clock.now()
    state["loops"] = {} if entry is None else {name: entry}
    lifecycle.reconcile({name: loop} if loop else {}, invalid, state, now, clock.zone_of)
    return loop, invalid, state, now


QUEUED_AT_MOST = 64  # each decodes its own cache line: beyond, one full read costs less


def queued(store: Store) -> list[dict[str, Any]] | None:
    """The queued loops as `views.list_brief` shows them (name, status,
    next_fire), for a queued loop's `slot 2/3` in `status NAME`: from the
    entries whose line holds `queued_at` and those loops' cache lines, each
    reconciled as the full read would; None: read them all."""
    from loopctl.domain import lifecycle
    from loopctl.domain.state import display_status

    parts = store.cached_parts()
    found = store.read_entries_holding("queued_at") if parts is not None else None
    if parts is None or found is None or found[0].get("accounts"):
        return None
    invalid, listed = parts.head["invalid"], set(parts.head["names"])
    entries = {name: entry for name, entry in found[1].items()
               if name in listed and name not in invalid and display_status(entry) == "queued"}
    if len(entries) > QUEUED_AT_MOST:
        return None
    loops = {name: loop for name in entries if (loop := defs_cache.one(parts.loops, name))}
    if len(loops) != len(entries):
        return None
    lifecycle.reconcile(loops, invalid, dict(found[0], loops=entries), clock.now(), clock.zone_of)
    return [{"name": name, "status": "queued", "next_fire": entry.next_due}
            for name, entry in entries.items()]


Readers = tuple[Any, Any, list[str], float]  # commands/loop_object.columns' arguments


def loop_readers(store: Store) -> tuple[Readers, list[str], dict[str, str]] | None:
    """For `ls --json` (commands/loop_object.columns) of the valid loops:
    the readers of each definition field, from the cache's columns of them
    (defs_cache.LISTED), and of each state field, from the packed entries
    (a field left out holds its common value), the schedule texts and now;
    with every loop name in file order and the invalid loops' errors. None:
    read it all. Taken when `brief` would be."""
    parts = store.cached_parts()
    columns = defs_cache.rows(parts.rows) if parts else None
    fields = defs_cache.listed(parts.listed, len(columns[0])) if parts and columns else None
    state = store.read_state_packed() if fields is not None else None
    if parts is None or columns is None or fields is None or state is None \
            or state.get("accounts"):
        return None
    every, invalid = parts.head["names"], parts.head["invalid"]
    if columns[0] != [name for name in every if name not in invalid]:
        return None
    names, entries, now = columns[0], state["loops"], clock.now()
    sts: list[Any] = list(map(entries.get, names))
    new = _where(map(is_, sts, repeat(None)))
    for at, entry in zip(new, _new_entries(columns, new, now), strict=True):
        sts[at] = entry
    field = _fields(sts)
    if not _settled(field, columns) or None in field("status"):
        return None
    readers = _loop_reader(names, fields), _entry_reader(sts, field), columns[1], now
    return readers, every, invalid


def _loop_reader(names: list[str], fields: dict[str, Any]) -> Any:
    """A definition field of every loop: `name`, or one of defs_cache.LISTED
    (a field no loop holds at other than its default, or all at one value,
    is that value in each, in one loop_object.Same)."""
    from loopctl.commands.loop_object import same

    def loop(attr: str) -> list[Any]:
        if attr == "name":
            return names
        if attr not in defs_cache.LISTED:
            raise KeyError(f"{attr}: not a field the cache lists")
        found = fields.get(attr)
        if found is None or type(found) is tuple:  # (value,): that value in every loop
            return same(defs_cache.field_default(attr) if found is None else found[0],
                        len(names))
        return found

    return loop


def _entry_reader(sts: list[dict[str, Any]], field: Any) -> Any:
    """A state field of every packed entry (one left out holds the common
    value): a field no entry holds, in one loop_object.Same."""
    from loopctl.commands.loop_object import same
    from loopctl.domain.state import common_values

    common, held = common_values(), set().union(*map(dict.keys, sts))

    def entry(key: str) -> list[Any]:
        if key not in held:
            return same(common.get(key), len(sts))
        return field(key, common.get(key))

    return entry
