"""Charts as SVG made by the server: no script, no CDN, they work offline
and in a page saved to disk. One renderer (`_frame`) draws every chart:
labelled axes whose labels fit (the left margin is the widest y label's
width in the font's metrics, `text_width`), run numbers or dates on x, and
a legend. Each chart takes the run records (oldest first) and returns one
`<svg>`; every text in it is escaped."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from typing import Any

from loopctl.domain.durations import format_usd
from loopctl.domain.run_record import RunRecord

WIDTH, HEIGHT, FONT = 640, 170, 10
TOP, BOTTOM, RIGHT = 22, 36, 12  # title above; x labels and legend below
OUTCOME_COLOURS = {"ok": "#2e7d32", "skipped": "#9e9e9e", "deferred": "#f9a825",
                   "timeout": "#ef6c00", "killed": "#6d4c41"}
FAILURE_COLOUR = "#c62828"
CHECK_FAILED = "check failed"
# Advance widths (em) of each printable ASCII character at its widest in DejaVu
# Sans and Liberation Sans (what `system-ui` and `sans-serif` fall back to; read
# from their hmtx tables, tests/serve/test_serve_charts.py), rounded up; any
# other character counts as wide as the widest. A label measured here is never
# shorter than where it is drawn.
WIDTHS = {0.28: "'ijl", 0.3: "I", 0.32: " ,.", 0.34: "/:;\\|", 0.36: "f", 0.37: "-",
          0.4: "()[]t", 0.41: "!", 0.42: "r", 0.46: '"', 0.5: "*J`", 0.53: "sz", 0.55: "c",
          0.56: "?L_", 0.58: "k", 0.6: "vxy", 0.62: "FTaeo", 0.64: "$0123456789bdghnpqu{}",
          0.67: "EKPSY", 0.69: "ABVXZ", 0.73: "CR", 0.74: "U", 0.75: "N", 0.76: "H",
          0.78: "&DG", 0.79: "OQ", 0.82: "w", 0.84: "#+<=>^~", 0.87: "M", 0.96: "%",
          0.98: "m", 0.99: "W", 1.02: "@"}
EM = {char: width for width, chars in WIDTHS.items() for char in chars}
OTHER = 1.05


def text_width(text: str, size: float = FONT) -> float:
    return sum(EM.get(char, OTHER) for char in text) * size


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten at or above `value`."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 2.5, 5, 10) if step * power >= value * 0.9999)


def _text(x: float, y: float, text: str, cls: str = "tick", anchor: str = "start") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" class="{cls}" text-anchor="{anchor}">'
            f"{escape(text)}</text>")


def _legend(items: Sequence[tuple[str, str]], left: float, height: int) -> list[str]:
    out, x = [], left
    for colour, label in items:
        out.append(f'<rect x="{x:.1f}" y="{height - 11}" width="9" height="9" fill="{colour}"/>')
        out.append(_text(x + 12, height - 3, label, "legend"))
        x += 12 + text_width(label) + 12
    return out


def _frame(title: str, body: list[str], left: float, y_ticks: Sequence[tuple[float, str]] = (),
           x_ticks: Sequence[tuple[float, str]] = (),
           legend: Sequence[tuple[str, str]] = (), height: int = HEIGHT) -> str:
    label = escape(title)
    bottom = height - BOTTOM
    axis = [f'<line x1="{left}" y1="{bottom}" x2="{WIDTH - RIGHT}" y2="{bottom}" class="axis"/>',
            f'<line x1="{left}" y1="{TOP}" x2="{left}" y2="{bottom}" class="axis"/>']
    axis += [_text(left - 4, y + 3, said, anchor="end") for y, said in y_ticks]
    axis += [_text(x, bottom + 12, said, anchor="middle") for x, said in x_ticks]
    return (f'<svg class="chart" role="img" aria-label="{label}" viewBox="0 0 {WIDTH} {height}"'
            f' width="{WIDTH}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
            f"<title>{label}</title>" + _text(4, 12, title, "title")
            + "".join(axis) + "".join(body) + "".join(_legend(legend, left, height))
            + "</svg>")


def _empty(title: str, why: str) -> str:
    return _frame(title, [_text(WIDTH / 2, HEIGHT / 2, why, "none", "middle")], 8)


def _slot(index: int, count: int, left: float) -> float:
    """The x of point `index` of `count`: one point sits at the start."""
    span = WIDTH - RIGHT - left - 16
    return left + 8 + (span * index / (count - 1) if count > 1 else 0)


def _x_ticks(keys: Sequence[str], left: float) -> list[tuple[float, str]]:
    count = len(keys)
    picks = sorted({0, count // 2, count - 1}) if count > 2 else range(count)
    return [(_slot(i, count, left), keys[i]) for i in picks]


def run_number(run_id: str) -> str:
    return "#" + str(int(run_id[17:])) if run_id[17:].isdigit() else run_id[:12]


def outcomes(records: Sequence[RunRecord]) -> str:
    """One bar per run, coloured by outcome (a failure, and a failed check, red)."""
    title = "Outcome per run"
    if not records:
        return _empty(title, "no runs yet")
    left, count = 8.0, len(records)
    width = max((WIDTH - RIGHT - left - 8) / count - 1, 1)
    bars, seen = [], dict[str, str]()
    for at, record in enumerate(records):
        outcome = str(record.outcome)
        failed_check = record.check is not None and not record.check.passed
        shown = CHECK_FAILED if failed_check and outcome == "ok" else outcome
        colour = FAILURE_COLOUR if failed_check else OUTCOME_COLOURS.get(outcome, FAILURE_COLOUR)
        seen.setdefault(shown, colour)
        x = left + 4 + (WIDTH - RIGHT - left - 8) * at / count
        bars.append(f'<rect x="{x:.1f}" y="{TOP}" width="{width:.1f}" '
                    f'height="{HEIGHT - BOTTOM - TOP}" fill="{colour}"><title>'
                    f'{escape(str(record.run_id))}: {escape(shown)}</title></rect>')
    ids = [run_number(str(r.run_id)) for r in records]
    ticks = [(left + 4 + (WIDTH - RIGHT - left - 8) * (i + 0.5) / count, ids[i])
             for i in sorted({0, count // 2, count - 1})]
    return _frame(title, bars, left, x_ticks=ticks,
                  legend=[(colour, name) for name, colour in seen.items()])


def _y(value: float, high: float) -> float:
    return HEIGHT - BOTTOM - (HEIGHT - BOTTOM - TOP - 4) * (value / high if high else 0)


def _series(title: str, points: list[tuple[str, float]], said: Any, name: str,
            unit: Any = lambda high: 1.0) -> str:
    """A line through the points (x label, value) over a scale from 0 to a
    round number in the unit its labels are written in (`unit(high)`)."""
    points = [(k, v) for k, v in points if math.isfinite(v) and v >= 0]
    if not points:
        return _empty(title, "nothing to show yet")
    most = max(v for _, v in points)
    high = nice_ceiling(most / unit(most)) * unit(most)
    labels = [said(high), said(high / 2), said(0.0)]
    left = 8 + max(text_width(t) for t in labels)
    count = len(points)
    coords = [(_slot(i, count, left), _y(v, high)) for i, (_, v) in enumerate(points)]
    path = " ".join(f"{'M' if i == 0 else 'L'}{x:.1f},{y:.1f}"
                    for i, (x, y) in enumerate(coords))
    body = [f'<path d="{path}" class="line"/>'] if count > 1 else []
    if count <= 200:
        body += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" class="dot"><title>'
                 f"{escape(key)}: {escape(said(v))}</title></circle>"
                 for (x, y), (key, v) in zip(coords, points, strict=True)]
    y_ticks = [(_y(v, high), t) for v, t in zip((high, high / 2, 0.0), labels, strict=True)]
    return _frame(title, body, left, y_ticks, _x_ticks([k for k, _ in points], left),
                  [("#1565c0", name)])


def time_unit(value: float) -> float:
    return 3600.0 if value >= 7200 else 60.0 if value >= 120 else 1.0


def seconds(value: float) -> str:
    unit = time_unit(value)
    return f"{value / unit:.3g} {dict([(3600.0, 'h'), (60.0, 'min')]).get(unit, 's')}"


def plain(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def durations(records: Sequence[RunRecord]) -> str:
    return _series("Duration per run", [(run_number(str(r.run_id)), float(r.duration_s))
                                        for r in records
                                        if isinstance(r.duration_s, (int, float))],
                   seconds, "duration of the run", time_unit)


def metric(records: Sequence[RunRecord]) -> str:
    return _series("Check metric per run",
                   [(run_number(str(r.run_id)), r.check.metric) for r in records
                    if r.check and r.check.metric is not None],
                   plain, "the check's metric")


def cost_per_day(records: Sequence[RunRecord]) -> str:
    days: dict[str, float] = {}
    for record in records:
        cost = record.cost_usd
        ended = record.ended_at or record.started_at
        if isinstance(cost, (int, float)) and isinstance(ended, str) and len(ended) >= 10:
            days[ended[:10]] = days.get(ended[:10], 0.0) + float(cost)
    if not days:
        return _empty("Cost per day (UTC)", "no run reported a cost")
    return _series("Cost per day (UTC)", [(k[5:], v) for k, v in sorted(days.items())],
                   format_usd, "spent that day")


def all_charts(records: Sequence[RunRecord]) -> list[str]:
    return [outcomes(records), durations(records), cost_per_day(records), metric(records)]


ROW, NAME_MAX = 16, 180.0
WAIT_COLOUR = "#b0bec5"


def fit(text: str, room: float) -> str:
    """`text` cut at a character (names have no words) with `…` to fit `room`."""
    if text_width(text) <= room:
        return text
    while text and text_width(text + "…") > room:
        text = text[:-1]
    return text + "…"


def _bar(x0: float, x1: float, y: float, colour: str, said: str, cls: str = "run") -> str:
    """`said` is markup already: run ids and outcomes are checked words,
    a reason is escaped by the caller."""
    return (f'<rect class="{cls}" x="{x0:.1f}" y="{y:.1f}" width="{max(x1 - x0, 2):.1f}" '
            f'height="{ROW - 4}" fill="{colour}"><title>{said}</title></rect>')


RED = frozenset(("failed", "timeout", "lost", "gate_error", "auth_error"))


def _timeline_row(row: dict[str, Any], y: float, place: Any, now: float) -> list[str]:
    out = []
    for run in row["runs"]:
        start = run["s"] or run["e"]
        if start is None:
            continue
        outcome, queued = run["o"], run["q"]
        colour = FAILURE_COLOUR if run["c"] or outcome in RED else \
            OUTCOME_COLOURS.get(outcome, FAILURE_COLOUR)
        x0 = place(start)
        if queued is not None and queued < start:
            out.append(_bar(place(queued), x0, y, WAIT_COLOUR, f"{run['id']}: queued", "wait"))
        said = f"{run['id']}: {outcome}" + (f": {escape(run['r'])}" if run["r"] else "")
        out.append(_bar(x0, place(run["e"] or start), y, colour, said))
    current = row.get("current")
    if current and current.started:
        out.append(_bar(place(current.started), place(now), y, "#1565c0",
                        f"{escape(current.run_id)}: running", "run live"))
    return out


def timeline(rows: Sequence[dict[str, Any]], start: float, end: float) -> str:
    """The fleet's last day: a row per loop (its name on the left), a bar per
    run from start to end coloured by outcome, its queue wait grey before it,
    hours on x."""
    import time

    title = "Every loop's runs, last 24 hours (UTC)"
    if not rows:
        return _empty(title, "no loops yet")
    left = 8 + min(max(text_width(str(r["name"])) for r in rows), NAME_MAX)
    height = TOP + ROW * len(rows) + BOTTOM
    span = max(end - start, 1.0)

    scale = (WIDTH - RIGHT - left) / span

    def place(at: float) -> float:
        return left + scale * (at - start if start < at < end else 0.0 if at <= start else span)

    body = []
    for i, row in enumerate(rows):
        y = TOP + ROW * i + 2
        name = str(row["name"])
        body.append(f'<text x="{left - 4:.1f}" y="{y + ROW - 6:.1f}" class="tick name" '
                    f'text-anchor="end">{escape(fit(name, left - 8))}<title>{escape(name)}'
                    "</title></text>")
        body += _timeline_row(row, y, place, end)
    hour = 3600
    first = math.ceil(start / (3 * hour)) * 3 * hour
    # A label is centred on its hour: one whose half would cross either
    # edge (the hour just gone at the right, at 21:02 for 21:00) is left out.
    half = text_width("00:00") / 2
    ticks = [(x, time.strftime("%H:%M", time.gmtime(at)))
             for at in range(int(first), int(end) + 1, 3 * hour)
             if left + half <= (x := place(at)) <= WIDTH - half]
    legend = [(OUTCOME_COLOURS["ok"], "ok"), (FAILURE_COLOUR, "failed or check failed"),
              (OUTCOME_COLOURS["deferred"], "deferred"), (WAIT_COLOUR, "waiting in the queue"),
              ("#1565c0", "running")]
    return _frame(title, body, left, x_ticks=ticks, legend=legend, height=height)
