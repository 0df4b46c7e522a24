"""Charts as SVG made by the server: no script, no CDN, they work offline
and in a page saved to disk. Each takes the run records (oldest first) and
returns one `<svg>` element; every text in it is escaped."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from typing import Any

WIDTH, HEIGHT, PAD = 640, 140, 34
OUTCOME_COLOURS = {"ok": "#2e7d32", "skipped": "#9e9e9e", "deferred": "#f9a825",
                   "timeout": "#ef6c00", "killed": "#6d4c41"}
FAILURE_COLOUR = "#c62828"


def _frame(title: str, body: list[str], y_max: str = "", y_min: str = "") -> str:
    label = escape(title)
    axis = [f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - 4}" y2="{HEIGHT - PAD}" '
            'class="axis"/>',
            f'<line x1="{PAD}" y1="14" x2="{PAD}" y2="{HEIGHT - PAD}" class="axis"/>']
    if y_max:
        axis.append(f'<text x="{PAD - 4}" y="20" class="tick" text-anchor="end">'
                    f"{escape(y_max)}</text>")
    if y_min:
        axis.append(f'<text x="{PAD - 4}" y="{HEIGHT - PAD}" class="tick" '
                    f'text-anchor="end">{escape(y_min)}</text>')
    return (f'<svg class="chart" role="img" aria-label="{label}" viewBox="0 0 {WIDTH} {HEIGHT}"'
            f' width="{WIDTH}" height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg">'
            f"<title>{label}</title>"
            f'<text x="{PAD}" y="10" class="title">{label}</text>'
            + "".join(axis) + "".join(body) + "</svg>")


def _empty(title: str, why: str) -> str:
    return _frame(title, [f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" class="none" '
                          f'text-anchor="middle">{escape(why)}</text>'])


def _x(index: int, count: int) -> float:
    span = WIDTH - PAD - 10
    return PAD + 5 + (span * index / max(count - 1, 1) if count > 1 else span / 2)


def _y(value: float, low: float, high: float) -> float:
    usable = HEIGHT - PAD - 20
    share = 0.5 if high == low else (value - low) / (high - low)
    return HEIGHT - PAD - usable * share


def _number(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def outcomes(records: Sequence[dict[str, Any]]) -> str:
    """One bar per run, coloured by outcome (a failure red), over time."""
    title = "Outcome per run"
    if not records:
        return _empty(title, "no runs yet")
    count = len(records)
    width = max((WIDTH - PAD - 10) / count - 1, 1)
    bars = []
    for at, record in enumerate(records):
        outcome = str(record.get("outcome"))
        colour = OUTCOME_COLOURS.get(outcome, FAILURE_COLOUR)
        x = PAD + 5 + (WIDTH - PAD - 10) * at / count
        bars.append(f'<rect x="{x:.1f}" y="20" width="{width:.1f}" height="{HEIGHT - PAD - 20}" '
                    f'fill="{colour}"><title>{escape(str(record.get("run_id")))}: '
                    f"{escape(outcome)}</title></rect>")
    return _frame(title, bars)


def _series(title: str, points: list[tuple[str, float]], unit: str) -> str:
    """A line through the points (label, value), dots where they are."""
    points = [(k, v) for k, v in points if math.isfinite(v)]
    if not points:
        return _empty(title, "nothing to show yet")
    values = [v for _, v in points]
    low, high = min(min(values), 0.0), max(values)
    count = len(points)
    coords = [(_x(i, count), _y(v, low, high)) for i, (_, v) in enumerate(points)]
    path = " ".join(f"{'M' if i == 0 else 'L'}{x:.1f},{y:.1f}"
                    for i, (x, y) in enumerate(coords))
    body = [f'<path d="{path}" class="line"/>']
    if count <= 200:
        body += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" class="dot"><title>'
                 f"{escape(key)}: {escape(_number(v))}{escape(unit)}</title></circle>"
                 for (x, y), (key, v) in zip(coords, points, strict=True)]
    return _frame(title, body, _number(high) + unit, _number(low) + unit)


def durations(records: Sequence[dict[str, Any]]) -> str:
    return _series("Duration per run (seconds)",
                   [(str(r["run_id"]), float(r["duration_s"])) for r in records
                    if isinstance(r.get("duration_s"), (int, float))], " s")


def metric(records: Sequence[dict[str, Any]]) -> str:
    return _series("Check metric per run",
                   [(str(r["run_id"]), float(r["check"]["metric"])) for r in records
                    if isinstance((r.get("check") or {}).get("metric"), (int, float))], "")


def cost_per_day(records: Sequence[dict[str, Any]]) -> str:
    days: dict[str, float] = {}
    for record in records:
        cost = record.get("cost_usd")
        ended = record.get("ended_at") or record.get("started_at")
        if isinstance(cost, (int, float)) and isinstance(ended, str) and len(ended) >= 10:
            days[ended[:10]] = days.get(ended[:10], 0.0) + float(cost)
    if not days:
        return _empty("Cost per day (USD)", "no run reported a cost")
    return _series("Cost per day (USD)", sorted(days.items()), " $")


def all_charts(records: Sequence[dict[str, Any]]) -> list[str]:
    return [outcomes(records), durations(records), cost_per_day(records), metric(records)]

