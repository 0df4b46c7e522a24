"""The charts' and the overview's pure parts (DESIGN §19 round 2): label
widths never short of the real font's (read from the TrueType files the
browser falls back to), every y label inside its SVG whatever the value,
`$0.28` never `.276 $`, a sensible scale for one point, run numbers or
dates on x, a legend; the digest read back from a hostile file; the
overview's counts and spend from a fake clock."""

from __future__ import annotations

import html
import re
import struct
from pathlib import Path

import pytest

from loopctl.commands import fleet
from loopctl.domain.run_record import RunRecord
from loopctl.domain.verify import check_record
from loopctl.serve import charts
from loopctl.storage import run_digest

FONTS = [Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"),
         Path("/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf")]
DAY = 86400.0
NOW = 1796466000.0  # 2026-12-05T09:40:00Z


def advances(font: Path) -> dict[str, float]:
    """Each printable ASCII character's advance width in em, from the font's
    own tables (cmap format 4, hmtx)."""
    data = font.read_bytes()
    count = struct.unpack(">H", data[4:6])[0]
    tables = {data[12 + 16 * i:16 + 16 * i].decode(): struct.unpack(
        ">I", data[20 + 16 * i:24 + 16 * i])[0] for i in range(count)}
    units = struct.unpack(">H", data[tables["head"] + 18:tables["head"] + 20])[0]
    metrics = struct.unpack(">H", data[tables["hhea"] + 34:tables["hhea"] + 36])[0]
    cmap = tables["cmap"]
    subtables = struct.unpack(">H", data[cmap + 2:cmap + 4])[0]
    for i in range(subtables):
        platform, encoding, offset = struct.unpack(">HHI", data[cmap + 4 + 8 * i:cmap + 12 + 8 * i])
        if (platform, encoding) == (3, 1):
            break
    at = cmap + offset
    segments = struct.unpack(">H", data[at + 6:at + 8])[0] // 2
    ends = struct.unpack(f">{segments}H", data[at + 14:at + 14 + 2 * segments])
    base = at + 16 + 2 * segments
    starts = struct.unpack(f">{segments}H", data[base:base + 2 * segments])
    deltas = struct.unpack(f">{segments}h", data[base + 2 * segments:base + 4 * segments])
    ranges_at = base + 4 * segments
    ranges = struct.unpack(f">{segments}H", data[ranges_at:ranges_at + 2 * segments])
    out = {}
    for code in range(32, 127):
        seg = next(s for s in range(segments) if ends[s] >= code)
        if ranges[seg] == 0:
            glyph = (code + deltas[seg]) & 0xFFFF
        else:
            where = ranges_at + 2 * seg + ranges[seg] + 2 * (code - starts[seg])
            glyph = struct.unpack(">H", data[where:where + 2])[0]
            glyph = (glyph + deltas[seg]) & 0xFFFF if glyph else 0
        row = min(glyph, metrics - 1)
        advance = struct.unpack(">H", data[tables["hmtx"] + 4 * row:tables["hmtx"] + 4 * row + 2])
        out[chr(code)] = advance[0] / units
    return out


@pytest.mark.parametrize("font", [f for f in FONTS if f.exists()], ids=lambda f: f.name)
def test_the_width_estimate_is_never_short_of_the_font(font: Path) -> None:
    real = advances(font)
    assert 0.5 < real["0"] < 0.7, "the font was read"
    short = {c: (charts.EM.get(c, charts.OTHER), width) for c, width in real.items()
             if charts.EM.get(c, charts.OTHER) < width}
    assert short == {}


def y_labels(svg: str) -> list[tuple[float, str]]:
    return [(float(x), text) for x, text in
            re.findall(r'<text x="([\d.]+)" y="[\d.]+" class="tick" text-anchor="end">([^<]*)<',
                       svg)]


def record(n: int, **fields: object) -> RunRecord:
    return RunRecord.new(f"20261205T0{n % 10}0000Z-{n:04d}", "x", outcome="ok",
                         started_at="2026-12-05T09:00:00Z", ended_at="2026-12-05T09:00:30Z",
                         **fields)


@pytest.mark.parametrize("value", [0.276, 0.0004, 3.5, 12_345.0, 9e9])
def test_cost_labels_fit_left_of_the_axis_and_read_as_dollars(value: float) -> None:
    svg = charts.cost_per_day([record(1, cost_usd=value)])
    labels = y_labels(svg)
    assert len(labels) == 3 and all(text.startswith("$") for _, text in labels)
    for x, text in labels:
        assert x - charts.text_width(text) >= 0, (text, x)


def test_one_point_has_a_scale_from_zero_x_labels_and_a_legend() -> None:
    svg = charts.cost_per_day([record(1, cost_usd=0.276)])
    assert [t for _, t in y_labels(svg)] == ["$0.50", "$0.25", "$0.00"]
    assert ">12-05</text>" in svg and 'class="legend"' in svg
    dot = re.search(r'<circle cx="[\d.]+" cy="([\d.]+)"', svg)
    assert dot and float(dot.group(1)) < charts.HEIGHT - charts.BOTTOM - 10, "not on the axis"
    durations = charts.durations([record(7, duration_s=0.208), record(8, duration_s=200.0)])
    assert [t for _, t in y_labels(durations)] == ["5 min", "2.5 min", "0 s"]
    assert ">#7</text>" in durations and ">#8</text>" in durations


def test_a_failed_check_is_a_red_bar_with_its_own_legend() -> None:
    svg = charts.outcomes([record(1), record(2, check=check_record(1, 0.5, "", None))])
    assert svg.count(f'fill="{charts.FAILURE_COLOUR}"><title>') == 1
    assert ">check failed</text>" in svg and ">ok</text>" in svg


def test_the_timeline_draws_runs_waits_and_hostile_names_as_text() -> None:
    rows = [{"name": "<script>x</script>" + "n" * 80, "runs": [
        {"id": "20261205T090000Z-0001", "o": "failed", "c": False, "r": '"quoted" <b>',
         "q": NOW - 3700, "s": NOW - 3600, "e": NOW - 3000, "usd": None}],
        "current": fleet.InFlight(run_id="20261205T093000Z-0002", started=NOW - 60)}]
    svg = charts.timeline(rows, NOW - DAY, NOW)
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert svg.count('class="run"') == 1 and svg.count('class="wait"') == 1
    assert svg.count('class="run live"') == 1 and "&quot;quoted&quot; &lt;b&gt;" in svg
    name = re.search(r'<text x="([\d.]+)"[^>]*class="tick name"[^>]*>([^<]*)<', svg)
    assert name and name.group(2).endswith("…")
    assert float(name.group(1)) - charts.text_width(html.unescape(name.group(2))) >= 0


@pytest.mark.parametrize("past", [0, 60, 600, 3 * 3600 - 60])
def test_the_timeline_s_hours_stay_inside_whatever_the_time(past: int) -> None:
    """An hour label is centred on its hour: at 21:01 the 21:00 one would
    hang off the right edge (the dashboard test saw it at 21:00 UTC)."""
    end = 1_796_590_800 + past  # 2026-12-06T21:00:00Z, a 3-hour boundary
    rows = [{"name": "docs", "runs": [], "current": None}]
    svg = charts.timeline(rows, end - DAY, end)
    ticks = [(float(x), said) for x, said in re.findall(
        r'<text x="([\d.]+)"[^>]*class="tick"[^>]*>(\d\d:\d\d)<', svg)]
    assert len(ticks) >= 6, ticks
    half = charts.text_width("00:00") / 2
    assert all(half <= x <= charts.WIDTH - half for x, _ in ticks), ticks


def test_a_hostile_digest_is_cleaned_entry_by_entry(tmp_path: Path) -> None:
    from loopctl.storage.paths import Paths

    paths = Paths(tmp_path / "config", tmp_path / "state")
    path = paths.run_digest("x")
    path.parent.mkdir(parents=True)
    good = {"id": "20261205T090000Z-0001", "o": "failed", "c": True, "r": "a\x1b[31mb",
            "q": None, "s": NOW, "e": NOW + 1, "usd": 0.5}
    path.write_text('{"runs": [' + ",".join([
        '{"id": "../../etc", "o": "ok"}', '{"id": "20261205T090000Z-0002", "o": "pwned"}',
        '"not a run"', '{"id": "20261205T090000Z-0003", "o": "ok", "s": NaN, "usd": -1}',
        __import__("json").dumps(good)]) + '], "days": {"2026-12-05": 1e999, "x": 1}}')
    digest = run_digest.read(paths, "x")
    assert [r["id"] for r in digest["runs"]] == ["20261205T090000Z-0003",
                                                  "20261205T090000Z-0001"]
    assert digest["runs"][0]["s"] is None and digest["runs"][0]["usd"] is None
    assert digest["runs"][1]["r"] == "ab" and digest["days"] == {}
    path.write_bytes(b"\xff" * (run_digest.MAX_BYTES + 10))
    assert run_digest.read(paths, "x") == {"runs": [], "days": {}}


def loop(name: str, status: str = "active", reason: str | None = None,
         strip: tuple[str, ...] = (), spent: float = 0.0,
         budget: float | None = None) -> dict[str, object]:
    return {"name": name, "status": status, "reason": reason,
            "cost_usd": {"spent": spent, "budget": budget},
            "strip": [{"id": "x", "o": o.rstrip("!"), "c": o.endswith("!")} for o in strip]}


def test_counts_and_spend_from_a_fake_clock() -> None:
    listed = [loop("a", "paused", "blocked"), loop("b", "paused", "user"),
              loop("c", strip=("ok", "failed")), loop("d", strip=("failed", "ok!")),
              loop("e", strip=("failed", "ok")), loop("f", "running"), loop("g", "queued"),
              loop("h", "held", "rate_limited"), loop("i", "paused", "no_progress"),
              loop("j", spent=4.5, budget=5.0), loop("k", spent=1.0, budget=10.0)]
    counts = fleet._counts(listed)  # noqa: SLF001
    assert counts == {"needs_you": 2, "failing": 2, "running": 1, "queued": 1, "held": 1}
    days = [{"2026-12-05": 0.25, "2026-11-29": 1.0, "2026-11-28": 100.0}, {"2026-12-04": 0.5}]
    spend = fleet._spend(listed, days, NOW)  # noqa: SLF001
    assert (spend.today, spend.week, spend.total) == (0.25, 1.75, 5.5)
    assert [b["loop"] for b in spend.budgets] == ["j", "k"]
