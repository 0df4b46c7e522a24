"""The LOOP object (`ls --json`, `status NAME --json`; documented in the
README), a field at a time, from two readers of columns: `loop(attr)`, that
definition field of every loop, and `entry(key)`, that state field of every
(reconciled) entry. The full read gives them from LoopDefs and unpacked
entries (`readers`); commands/listing.py from the definitions cache's loop
lines and state.json's packed entries, read in C (`map`) without a LoopDef
or an unpacked entry per loop: one definition of the shape either way.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat
from operator import attrgetter, is_
from typing import TYPE_CHECKING, Any

from loopctl.domain.loop_settings import SETTINGS
from loopctl.domain.model import LoopDef
from loopctl.domain.state import ACTIVE, LoopState, fields_of
from loopctl.domain.timestamps import iso
from loopctl.domain.untrusted import mask
from loopctl.domain.verify import describe_check

if TYPE_CHECKING:
    from loopctl.domain.result import JsonPart

Column = Callable[[str], list[Any]]


def readers(loops: list[LoopDef],
            states: list[LoopState] | list[dict[str, Any]]) -> tuple[Column, Column]:
    """The two readers over LoopDefs and unpacked entries, in the same order."""
    def loop(attr: str) -> list[Any]:
        return list(map(attrgetter(attr), loops))

    fields = list(map(fields_of, states))  # records (read_state) or entries as written

    def entry(key: str) -> list[Any]:
        return list(map(dict.get, fields, repeat(key)))

    return memo(loop), memo(entry)


class Same(list[Any]):
    """A column made to hold one object in every cell (`each`, `isos`, the
    short path's readers): known so without looking at its cells, and
    written once (cli/direct.listing tells fast/jsontext). Never changed in
    place: views._show_held replaces the columns it changes."""


def same(value: Any, count: int) -> list[Any]:
    """`value` in `count` cells, a Same (never an empty one: `column[0]`)."""
    return Same([value] * count) if count else []


def memo(read: Column) -> Column:
    """`read`, each column read once (several fields read the same one)."""
    done: dict[str, list[Any]] = {}

    def column(key: str) -> list[Any]:
        if key not in done:
            done[key] = read(key)
        return done[key]

    return column


def isos(times: list[Any]) -> list[Any]:
    """`iso` of each, each distinct time formatted once (most entries of a
    home share theirs: no run, created by one `start` script)."""
    if times and uniform(times):
        return same(iso(times[0]), len(times))
    texts = {at: iso(at) for at in set(times)}
    return list(map(texts.__getitem__, times))


def columns(loop: Column, entry: Column, texts: list[str], now: float) -> dict[str, list[Any]]:
    """Every field of the LOOP object, in the documented order. `texts`:
    each loop's `schedule_text()`."""
    status, deadline, reason = entry("status"), entry("deadline"), entry("reason")
    out = {
        "name": loop("name"),
        "status": shown_status(status, entry("run"), entry("queued_at")),
        "reason": reason,
        "held": same(None, len(status)),
        "schedule": each(lambda a, b, c, d, e, f: {"every_s": a, "auto": b, "cron": c, "tz": d,
                                                   "on_demand": e, "text": f},
                         loop("every"), loop("auto"), loop("cron"), loop("tz"),
                         loop("on_demand"), texts),
        "agent": loop("agent"),
        "command": each(lambda argv: list(argv) if argv else None, loop("command")),
        "fallback_agent": loop("fallback_agent"),
        "cwd": loop("cwd"),
        "runs": each(lambda a, b: {"used": a, "limit": b or None},
                     entry("iterations"), loop("max_runs")),
        "failures": each(_count, entry("failures"), loop("max_failures")),
        "deferrals": each(_count, entry("deferrals"), loop("max_deferrals")),
        "cost_usd": each(lambda a, b, c: {"spent": a, "budget": b, "estimated": bool(c)},
                         entry("cost_usd"), loop("budget_usd"), entry("cost_estimated")),
        "created_at": isos(entry("created")),
        "deadline": isos(deadline),
        "deadline_remaining_s": each(lambda at: round(at - now) if at > now else 0, deadline),
        "next_fire": isos(each(_if_active, entry("next_due"), status)),
        **_runs(entry),
        "queued_since": isos(each(_if_active, entry("queued_at"), status)),
        "skipped_slots": each(_skips, entry("skips")),
    }
    return {**out, **_rest(loop, entry, reason), **_own(loop)}


def _own(loop: Column) -> dict[str, list[Any]]:
    """The rows shown as a field of their own (`view="own"`), after the
    documented fields: a setting added as its row is listed with no code here."""
    return {s.key: each(_json_ready, loop(s.name)) for s in SETTINGS if s.view == "own"}


def _json_ready(value: Any) -> Any:
    return list(value) if type(value) is tuple else value


def _skips(skips: Any) -> Any:
    """Due slots that did not run (DESIGN §20): how many, by reason, the last."""
    if not skips:
        return None
    last = skips.get("last")
    return {"count": sum(skips["counts"].values()), "by_reason": dict(skips["counts"]),
            "last": last and {"reason": last["reason"], "at": iso(last["at"])}}


def _if_active(at: Any, kind: str) -> Any:
    return at if kind == ACTIVE else None


def _count(consecutive: Any, limit: Any) -> JsonPart:
    return {"consecutive": consecutive, "limit": limit or None}


def each(make: Callable[..., Any], *columns: list[Any]) -> list[Any]:
    """`make` of each loop's values; made once, and that one object listed
    for every loop, when each column holds one value everywhere (most of a
    home: what a script's `start`s gave them all, no run yet): building
    and then comparing 10,000 equal mappings is most of `ls --json`."""
    count = len(columns[0])
    if count and all(map(uniform, columns)):
        return same(make(*(column[0] for column in columns)), count)
    return list(map(make, *columns))


def uniform(column: list[Any]) -> bool:
    """One value everywhere, written alike (one type; floats bit for bit;
    a container only if it is one object)."""
    first = column[0]
    if type(column) is Same or all(map(is_, column, repeat(first))):
        return True
    if type(first) in (dict, list, tuple) or column.count(first) != len(column) \
            or set(map(type, column)) != {type(first)}:
        return False
    # Equal floats differ in their bits only as 0.0 and -0.0 (NaN is unequal).
    return type(first) is not float or first != 0 or len(set(map(float.hex, column))) == 1


def shown_status(status: list[str], run: list[Any], queued: list[Any]) -> list[str]:
    """domain.state.display_status of each entry."""
    return ["running" if busy else "queued" if since is not None and kind == ACTIVE else kind
            for kind, busy, since in zip(status, run, queued, strict=True)]


def _runs(entry: Column) -> dict[str, list[Any]]:
    ids = entry("last_run_id")
    return {
        # A mapping per loop, never shared: views.with_reason writes each one's reason.
        "last_run": same(None, len(ids)) if type(ids) is Same and not ids[0] else
        [{"run_id": a, "outcome": b, "ended_at": iso(c)} if a else None
         for a, b, c in zip(ids, entry("last_outcome"), entry("last_end"), strict=True)],
        "current_run": each(lambda run: {"run_id": run["run_id"],
                                         "started_at": iso(run.get("started_at"))}
                            if run else None, entry("run")),
        "pending_fire": each(bool, entry("pending")),
    }


def _rest(loop: Column, entry: Column, reason: list[Any]) -> dict[str, list[Any]]:
    return {
        "after_run": entry("after_run"),
        "recent_outcomes": each(lambda seen: list(seen or ()), entry("outcomes")),
        "last_decision": entry("last_decision"),
        "ended_at": isos(entry("ended_at")),
        "observed_at": isos(entry("observed_at")),
        "note": entry("note"),
        "rate_limited_until": isos(each(lambda at, why: at if why == "rate_limited" else None,
                                        entry("resume_at"), reason)),
        "hook_error": each(_delivery_error, entry("hook_error")),
        "notify": each(lambda urls: [mask(url) for url in urls] if urls else [], loop("notify")),
        "workspace": _workspaces(loop),
        "pr_feedback": entry("pr_feedback"),
        "notes": loop("notes"),
        "last_handoff": entry("last_handoff"),
        "notify_error": each(_delivery_error, entry("notify_error")),
        "gate": each(lambda argv, limit: {"argv": list(argv), "timeout_s": limit}
                     if argv else None, loop("gate"), loop("gate_timeout")),
        "triggers_pending": each(lambda asked: (asked or {}).get("count", 0),
                                 entry("triggered")),
        "check": each(describe_check, loop("check"), loop("check_timeout"),
                      loop("until_check"), loop("check_metric")),
        "last_check": entry("last_check"),
        "github": each(lambda a, b, c, d: {"events": list(a), "repo": b, "command": c,
                                           "anyone": d} if a else None,
                       loop("on_github"), loop("github_repo"), loop("github_command"),
                       loop("github_anyone")),
    }


def _workspaces(loop: Column) -> list[dict[str, Any] | None]:
    return each(lambda a, b, c, d, e, f, g, h: {
        "base": b, "branch_prefix": c, "push": d, "pr": e, "merge": f,
        "fix_attempts": g if e else None, "protect": list(h)} if a else None,
        loop("worktree"), loop("base"), loop("branch_prefix"), loop("push"), loop("pr"),
        loop("merge"), loop("fix_attempts"), loop("protect"))


def _delivery_error(error: dict[str, Any] | None) -> JsonPart | None:
    return {"at": iso(error["at"]), "message": error["message"]} if error else None
