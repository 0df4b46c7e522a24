"""The overview (DESIGN §19 round 2): what needs the person first (counts
and spend), then one row per loop with its last outcomes as a strip of
cells, its status reason in words, and its limits. Below 700 px the rows
are cards (app.css); every string from a user or an agent is escaped."""

from __future__ import annotations

from typing import Any

from loopctl import clock
from loopctl.commands import fleet
from loopctl.commands.fleet import Spend
from loopctl.domain.durations import format_usd
from loopctl.domain.outcomes import FAILURES
from loopctl.domain.timestamps import iso
from loopctl.serve.pages import (
    _holds,
    _last_cell,
    _limits,
    _when,
    esc,
    href,
    layout,
    version_now,
)
from loopctl.storage.store import Store

COUNTS = (("needs_you", "need you"), ("failing", "failing"), ("running", "running"),
          ("queued", "queued"), ("held", "held"))


def cell(base: str, run: dict[str, Any]) -> str:
    """One run of the strip: red for a failure or a failed check, its run
    id and reason on hover, a link to the run. `base`: the loop's runs URL,
    escaped; run ids and outcomes are checked words (storage/run_digest)."""
    outcome = "check_failed" if run["c"] and run["o"] == "ok" else run["o"]
    reason = run["r"]
    said = f"{run['id']}: {outcome.replace('_', ' ')}" + (f": {esc(reason)}" if reason else "")
    red = " red" if run["c"] or run["o"] in FAILURES else ""
    return f'<a class="cell o-{outcome}{red}" href="{base}{run["id"]}" title="{said}"></a>'


def strip(name: str, runs: list[dict[str, Any]]) -> str:
    if not runs:
        return '<span class="none">no runs yet</span>'
    base = esc(href(name)) + "/runs/"
    return f'<span class="strip">{"".join([cell(base, run) for run in runs])}</span>'


def _status(loop: dict[str, Any]) -> str:
    status = str(loop.get("status"))
    said = loop.get("said")
    return (f'<span class="status s-{esc(status.split()[0])}">{esc(status)}</span>'
            + (f'<div class="reason">{esc(said)}</div>' if said else ""))


def _row(loop: dict[str, Any], now: float) -> str:
    name = str(loop.get("name"))
    attention = " needs-you" if fleet.needs_you(loop) else ""
    if loop.get("status") == "invalid":
        return (f'<tr class="invalid{attention}"><td data-k="loop">{esc(name)}</td>'
                f'<td data-k="status" colspan="8">{_status(loop)}</td></tr>')
    used, spent = _limits(loop)
    waiting = "queued" if loop.get("queued_since") else (
        f"{loop['triggers_pending']} trigger(s)" if loop.get("triggers_pending") else "")
    cells = (("status", _status(loop)), ("last 20", strip(name, loop["strip"])),
             ("last run", _last_cell(loop)), ("schedule", esc(loop["schedule"]["text"])),
             ("next fire", _when(loop.get("next_fire"), now)), ("runs", esc(used)),
             ("spent", esc(spent)), ("waiting", esc(waiting)))
    return (f'<tr class="loop{attention}" data-loop="{esc(name)}"><td data-k="loop">'
            f'<a href="{esc(href(name))}">{esc(name)}</a></td>'
            + "".join(f'<td data-k="{k}">{v}</td>' for k, v in cells) + "</tr>")


def _counts(counts: dict[str, int]) -> str:
    items = "".join(f'<li class="count c-{key}{" zero" if not counts[key] else ""}" '
                    f'id="count-{key}"><b>{counts[key]}</b> {label}</li>'
                    for key, label in COUNTS)
    return f'<ul class="counts">{items}</ul>'


def _spend(spend: Spend) -> str:
    budgets = "".join(
        f'<li><a href="{esc(href(b["loop"]))}">{esc(b["loop"])}</a> '
        f'<meter min="0" max="1" low="0.7" high="0.9" optimum="0" '
        f'value="{min(b["share"], 1):.3f}"></meter> {esc(format_usd(b["spent"]))} of '
        f'{esc(format_usd(b["budget"]))}</li>' for b in spend.budgets[:10])
    return (f'<section class="spend"><p><b id="spent-today">{esc(format_usd(spend.today))}'
            f'</b> today · <b id="spent-week">{esc(format_usd(spend.week))}</b> over 7 days'
            f' · {esc(format_usd(spend.total))} in all</p>'
            + (f'<ul class="budgets">{budgets}</ul>' if budgets else "") + "</section>")


HEAD = "".join(f"<th>{k}</th>" for k in ("loop", "status", "last 20", "last run", "schedule",
                                        "next fire", "runs", "spent", "waiting"))


def overview(store: Store, app: Any) -> bytes:
    version, now = version_now(store), clock.now()
    seen = fleet.overview(store, now)
    listed = seen.loops
    first = sorted(listed, key=lambda loop: (not fleet.needs_you(loop),
                                             not fleet.failing(loop, loop["strip"])))
    table = (f'<table class="loops"><thead><tr>{HEAD}</tr></thead><tbody>'
             + "".join(_row(loop, now) for loop in first) + "</tbody></table>") if listed else \
        '<p class="none">no loops yet: <code>loopctl start --every 10m ...</code></p>'
    body = (f"<h1>{len(listed)} loop{'s' if len(listed) != 1 else ''}"
            f' <small>at {esc(iso(now))} · <a href="/timeline">last 24 hours</a></small></h1>'
            + _counts(seen.counts) + _spend(seen.spend) + _holds(store, now) + table)
    return layout("loops", body, app, version=version)


def timeline(store: Store, app: Any) -> bytes:
    from loopctl.serve import charts

    version, now = version_now(store), clock.now()
    seen = fleet.timeline(store, now)
    body = ('<h1>Last 24 hours <small><a href="/">back to the loops</a></small></h1>'
            f'<div class="wide">{charts.timeline(seen.loops, seen.start, seen.end)}</div>')
    return layout("last 24 hours", body, app, page="/timeline", version=version)
