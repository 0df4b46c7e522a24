"""What the dashboard's overview and fleet timeline show (DESIGN §19 round
2), one reading the server and any other caller share: every loop's LOOP
object (`ls --json`) with its last STRIP outcomes and its status in words,
the counts a person asks about first (needs you, failing, running, queued,
held), the spend today, over 7 days and against each budget, and each
loop's runs over the last day. The runs come from each loop's digest
(storage/run_digest.py): one small file per loop, never every record."""

from __future__ import annotations

import time
from typing import Any

from loopctl.commands import views
from loopctl.domain.outcomes import FAILURES
from loopctl.fast.data_class import record
from loopctl.storage.run_digest import read_many
from loopctl.storage.store import Store

STRIP = 20
DAY_S = 24 * 3600
WORDED = 100  # paused loops whose reason is worded from their definition, per view
FIXED_BY_USER = (None, "user", "rate_limited")


@record(frozen=True)
class Spend:
    """Spent `today` and over the last 7 days (`week`) by the runs' digests,
    `total` by the loops' counters, and each budget's share, most spent first."""

    today: float
    week: float
    total: float
    budgets: list[dict[str, Any]]


@record(frozen=True)
class Overview:
    """Every loop's LOOP object with its `strip` and `said`, the `counts`
    (needs_you, failing, running, queued, held) and the `spend`."""

    loops: list[dict[str, Any]]
    counts: dict[str, int]
    spend: Spend


@record(frozen=True)
class InFlight:
    """A loop's run in flight: its id, and when it started (epoch seconds)."""

    run_id: str
    started: float


@record(frozen=True)
class Timeline:
    """Each loop's runs (`loops`: name, status, runs, current) between
    `start` and `end`, epoch seconds."""

    start: float
    end: float
    loops: list[dict[str, Any]]


def red(run: dict[str, Any]) -> bool:
    """A run shown red: a failure, or a run whose check failed (§16)."""
    return run["o"] in FAILURES or bool(run.get("c"))


def needs_you(loop: dict[str, Any]) -> bool:
    status = loop.get("status")
    return status in ("failed", "expired", "invalid") or (
        status == "paused" and loop.get("reason") not in FIXED_BY_USER)


def failing(loop: dict[str, Any], strip: list[dict[str, Any]]) -> bool:
    return bool(strip) and red(strip[-1])


def _words(store: Store, loop: dict[str, Any], budget: list[int]) -> str | None:
    """The status's reason in words (`no_progress: 3 identical results in a
    row; ...`), as a refused `run` says it; the bare reason past WORDED."""
    reason = loop.get("reason") or loop.get("error")
    if loop.get("status") != "paused" or loop.get("reason") in (None, "user"):
        return str(reason) if reason else None
    if reason == "blocked":
        asked = (loop.get("last_decision") or {}).get("summary")
        return (f"blocked: the agent asks: {asked}" if asked else "blocked by the agent") + \
            f"; answer on its page or with `loopctl resume {loop['name']} --answer TEXT`"
    if budget[0] <= 0:
        return str(reason)
    budget[0] -= 1
    fix = views.status(store, str(loop["name"]), for_people=True).fix
    return f"{reason}: {fix}" if fix else str(reason)


def _counts(listed: list[dict[str, Any]]) -> dict[str, int]:
    counts = dict.fromkeys(("needs_you", "failing", "running", "queued", "held"), 0)
    for loop in listed:
        counts["needs_you"] += needs_you(loop)
        counts["failing"] += failing(loop, loop.get("strip") or [])
        status = loop.get("status")
        counts["running"] += status == "running"
        counts["queued"] += status == "queued"
        counts["held"] += status == "held"
    return counts


def _spend(listed: list[dict[str, Any]], days: list[dict[str, float]], now: float) -> Spend:
    week = {time.strftime("%Y-%m-%d", time.gmtime(now - d * DAY_S)) for d in range(7)}
    today = time.strftime("%Y-%m-%d", time.gmtime(now))
    budgets = []
    for loop in listed:
        cost = loop.get("cost_usd") or {}
        if cost.get("budget"):
            budgets.append({"loop": loop["name"], "spent": cost.get("spent") or 0.0,
                            "budget": cost["budget"],
                            "share": (cost.get("spent") or 0.0) / cost["budget"]})
    budgets.sort(key=lambda b: -b["share"])
    return Spend(today=sum(d.get(today, 0.0) for d in days),
                 week=sum(v for d in days for k, v in d.items() if k in week),
                 total=sum((loop.get("cost_usd") or {}).get("spent") or 0.0 for loop in listed),
                 budgets=budgets)


def overview(store: Store, now: float) -> Overview:
    """Every loop (`ls --json`) with `strip` (its last STRIP runs in brief,
    oldest first) and `said` (its status reason in words); `counts` and
    `spend` over them all."""
    listed = views.list_loops(store)
    days, budget = [], [WORDED]
    digests = read_many(store.paths, [str(loop["name"]) for loop in listed], STRIP)
    for loop, digest in zip(listed, digests, strict=True):
        if loop.get("status") == "invalid":
            loop["strip"], loop["said"] = [], loop.get("error")
            continue
        loop["strip"] = digest["runs"]
        loop["said"] = _words(store, loop, budget)
        days.append(digest["days"])
    return Overview(loops=listed, counts=_counts(listed), spend=_spend(listed, days, now))


def timeline(store: Store, now: float, span_s: float = DAY_S) -> Timeline:
    """Each loop's runs that overlap the last `span_s` seconds (from its
    digest), and the run in flight."""
    start = now - span_s
    rows = []
    listed = [loop for loop in views.list_loops(store) if loop.get("status") != "invalid"]
    digests = read_many(store.paths, [str(loop["name"]) for loop in listed])
    for loop, digest in zip(listed, digests, strict=True):
        runs = [r for r in digest["runs"] if (r.get("e") or r.get("s") or 0) >= start]
        rows.append({"name": loop["name"], "status": loop.get("status"), "runs": runs,
                     "current": _in_flight(loop.get("current_run"))})
    return Timeline(start=start, end=now, loops=rows)


def _in_flight(current: dict[str, Any] | None) -> InFlight | None:
    from loopctl.domain.timestamps import parse_iso

    if not current or not isinstance(current.get("started_at"), str):
        return None
    try:
        return InFlight(run_id=str(current["run_id"]), started=parse_iso(current["started_at"]))
    except ValueError:
        return None
