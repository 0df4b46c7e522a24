"""Issue 50 item 6 (DESIGN §3 "One schedule, one meaning, everywhere"): for
generated cron expressions and zones, the next 50 instants loopctl fires
equal each export target's, read by the target itself where it is on this
machine (`systemd-analyze calendar --iterations=50`, one call for all
examples; actionlint for GitHub's grammar) and otherwise by a reader written
from the target's own sources (tests/export/cron_readers.py: Debian's cron,
robfig/cron as Kubernetes runs it). An export that cannot say the same
instants must be refused, in one line naming the target."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any
from zoneinfo import ZoneInfo

import actionlint_support
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from export import cron_readers
from loopctl.domain.checks import check_cron
from loopctl.domain.errors import UsageError
from loopctl.domain.schedule import cron_next
from loopctl.integrations.export.cron_forms import (
    CronForm,
    calendar_lines,
    check_dst,
    cron_line,
    parse_form,
)
from loopctl.integrations.export.schedules import github_lines, offset_text

COUNT = 50
UNTIL = datetime(2030, 1, 1, tzinfo=timezone.utc)  # the DST checks look at 2026-2029
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe",
         "America/Sao_Paulo"]
# Half a minute past the hour, beside DST changes (Berlin, New York, Lord Howe)
BASES = ["2026-01-01T00:00:30", "2026-03-07T12:00:30", "2026-03-28T20:00:30",
         "2026-10-24T20:00:30", "2026-10-31T20:00:30", "2026-04-04T10:00:30",
         "2026-10-03T10:00:30"]
MONTHS = ["jan", "FEB", "mar", "Apr", "dec"]
DAYS = ["sun", "MON", "tue", "Fri", "sat"]


def _field(lo: int, hi: int, names: list[str] | None = None) -> st.SearchStrategy[str]:
    number = st.integers(lo, hi).map(str)
    if names:
        number = number | st.sampled_from(names)
    span = hi - lo + 1
    pair = st.tuples(st.integers(lo, hi), st.integers(lo, hi)).map(sorted)
    part = st.one_of(
        number,
        st.integers(2, span).map(lambda s: f"*/{s}"),
        pair.map(lambda p: f"{p[0]}-{p[1]}"),
        st.tuples(pair, st.integers(2, 9)).map(lambda t: f"{t[0][0]}-{t[0][1]}/{t[1]}"),
    )
    return st.just("*") | st.lists(part, min_size=1, max_size=3).map(",".join)


EXPRESSIONS = st.one_of(
    st.tuples(_field(0, 59), _field(0, 23), _field(1, 31), _field(1, 12, MONTHS),
              _field(0, 7, DAYS)).map(" ".join),
    st.tuples(st.sampled_from(["0", "30", "*/15", "5/20", "0,30"]),
              st.sampled_from(["2", "1-3", "*", "9", "*/6", "3/4"]),
              st.sampled_from(["*", "*/2", "1,15", "L", "15W", "?"]),
              st.sampled_from(["*", "jan-mar", "*/3"]),
              st.sampled_from(["*", "1#2", "MON-FRI", "sun", "5-1", "*/2", "7"])).map(" ".join),
    st.sampled_from(["@daily", "@hourly", "@weekly", "@monthly", "@yearly"]),
)


def loopctl_instants(expr: str, tz: str, base: float) -> list[float]:
    out, instant, zone = [], base, ZoneInfo(tz)
    while len(out) < COUNT:
        instant = cron_next(expr, zone, instant)
        if instant >= UNTIL.timestamp():
            break
        out.append(instant)
    return out


def _walls_to_instants(walls: list[datetime], tz: str) -> list[float]:
    """The instants a cron daemon fires the wall times at: one in a
    spring-forward gap does not come round and is skipped (read with the
    offset before the gap, a half-hour gap's 02:10 in Lord Howe named the
    instant of the 02:40 that does come: a second fire of it)."""
    zone = ZoneInfo(tz)
    return [at for w in walls
            if datetime.fromtimestamp(at := w.replace(tzinfo=zone).timestamp(),
                                      zone).replace(tzinfo=None) == w]


def _wall(base: float, tz: str) -> datetime:
    return datetime.fromtimestamp(base, ZoneInfo(tz)).replace(tzinfo=None)


def cron_instants(line: str, dialect: str, tz: str, base: float) -> list[float]:
    # A gap skips what it holds: up to two hours of minutes (Troll's is 2 h).
    walls = cron_readers.first(line, dialect, _wall(base, tz), COUNT + 5 + 120,
                               UNTIL.astimezone(ZoneInfo(tz)).replace(tzinfo=None))
    return [t for t in _walls_to_instants(walls, tz) if t > base][:COUNT]


def github_instants(lines: Any, tz: str, base: float) -> list[float]:
    """GitHub fires each UTC line; the guard keeps a fire whose line was made
    for the offset in force."""
    fired: set[float] = set()
    for line in lines.crons:
        for instant in cron_instants(line, "debian", "UTC", base):
            offset = datetime.fromtimestamp(instant, ZoneInfo(tz)).utcoffset()
            if not lines.needs_guard or lines.offsets[line] == offset_text(offset):
                fired.add(instant)
    return sorted(fired)[:COUNT]


def _exports(form: CronForm, tz: str) -> dict[str, Callable[[], Any]]:
    def systemd() -> list[str]:
        check_dst(form, tz, "systemd", repeated=False, year=2026)
        return calendar_lines(form, tz)

    def cron(target: str) -> Callable[[], str]:
        def make() -> str:
            line = cron_line(form, target)
            check_dst(form, tz, target, repeated=True, year=2026)
            return line
        return make

    def github() -> Any:
        return github_lines(form, tz, year=2026)

    return {"systemd": systemd, "crontab": cron("crontab"), "k8s": cron("k8s"),
            "github": github}


def export_all(expr: str, tz: str) -> dict[str, Any]:
    """Each target's export of `expr`, or the refusal's text."""
    made: dict[str, Any] = {}
    for target in ("systemd", "crontab", "k8s", "github"):
        try:
            made[target] = _exports(parse_form(expr, target), tz)[target]()
        except UsageError as exc:
            text = str(exc)
            assert "\n" not in text and f"--to {target}" in text, text
            made[target] = exc
    return made


def systemd_elapses(calendars: list[str], base: float) -> list[list[float]]:
    """`systemd-analyze calendar --iterations=50` for every calendar, one call."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    proc = subprocess.run([analyze, "calendar", f"--iterations={COUNT}",
                           f"--base-time=@{int(base)}", *calendars],
                          capture_output=True, text=True, env={"TZ": "UTC", "PATH": "/usr/bin"},
                          check=False)
    assert proc.returncode == 0, proc.stderr
    blocks = [b for b in proc.stdout.split("\n\n") if "Normalized form" in b]
    assert len(blocks) == len(calendars), proc.stdout
    return [[datetime.strptime(m, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
             for m in re.findall(r"(?:Next elapse|Iter\. #\d+): \w+ (\S+ \S+) UTC", block)]
            for block in blocks]


CASES: list[tuple[str, str, float]] = []


@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(expr=EXPRESSIONS, tz=st.sampled_from(ZONES), base=st.sampled_from(BASES))
# Cases every target exports, so the count below holds whatever the draw:
# 40 random draws once gave GitHub only 2 (most draws are refused there).
@example(expr="0 9 * * *", tz="UTC", base=BASES[0])
@example(expr="*/15 * * * *", tz="UTC", base=BASES[1])
@example(expr="30 9 * * 1-5", tz="Asia/Kolkata", base=BASES[2])
@example(expr="@daily", tz="UTC", base=BASES[3])
@example(expr="0 0 1 * *", tz="UTC", base=BASES[4])
@example(expr="5 4 * * sun", tz="UTC", base=BASES[5])
# A half-hour spring-forward gap (Lord Howe): its walls do not come round.
@example(expr="* 2-16 * */11,2-10,FEB */5", tz="Australia/Lord_Howe",
         base="2026-10-03T10:00:30")
def _collect(expr: str, tz: str, base: str) -> None:
    try:
        check_cron(expr)
    except UsageError:
        return
    CASES.append((expr, tz, datetime.fromisoformat(base + "+00:00").timestamp()))


def test_every_export_fires_loopctls_next_50_instants_or_is_refused() -> None:
    CASES.clear()
    _collect()
    exported = {t: 0 for t in ("systemd", "crontab", "k8s", "github")}
    systemd_cases, github_lines = [], []
    for expr, tz, base in CASES:
        want = loopctl_instants(expr, tz, base)
        made = export_all(expr, tz)
        for target, dialect in (("crontab", "debian"), ("k8s", "robfig")):
            if not isinstance(made[target], UsageError):
                exported[target] += 1
                got = cron_instants(made[target], dialect, tz, base)
                assert got == want[:len(got)] and len(got) == len(want), (target, expr, tz)
        if not isinstance(made["github"], UsageError):
            exported["github"] += 1
            github_lines += made["github"].crons
            got = github_instants(made["github"], tz, base)
            assert got == want, ("github", expr, tz)
        if not isinstance(made["systemd"], UsageError):
            exported["systemd"] += 1
            systemd_cases.append((expr, tz, base, made["systemd"], want))
    _compare_systemd(systemd_cases)
    _lint_github(github_lines)
    # the generator must reach every target, or this proves nothing
    assert all(n >= 5 for n in exported.values()), exported


def _compare_systemd(cases: list[tuple[str, str, float, list[str], list[float]]]) -> None:
    for base in {c[2] for c in cases}:
        batch = [c for c in cases if c[2] == base]
        elapses = iter(systemd_elapses([line for c in batch for line in c[3]], base))
        for expr, tz, _, lines, want in batch:
            fired = sorted({t for _ in lines for t in next(elapses)})
            fired = [t for t in fired if t < UNTIL.timestamp()][:COUNT]
            assert fired == want, ("systemd", expr, tz, lines)


def _lint_github(lines: list[str]) -> None:
    if not actionlint_support.available():
        return
    crons = "".join(f"    - cron: '{c}'\n" for c in dict.fromkeys(lines))
    actionlint_support.lint("on:\n  schedule:\n" + crons + "jobs:\n  run:\n"
                            "    runs-on: ubuntu-latest\n    steps:\n      - run: 'true'\n")
