"""A loop's cron expression as each export target can say it, with the
same instants loopctl fires, or a refusal (DESIGN §3 "One schedule, one
meaning, everywhere", §9). Pure: the zone rules are the only clock.

loopctl reads a field's values as croniter expands them, and the two day
fields as crontab(5) does (`schedule.day_or`). The targets differ:

- Debian's cron: numbers, `*`, ranges, `a-b/S`, `*/S`; `N/S` alone, `L`, `W`
  and `#` are not its grammar (it ignores `#2`), and a day field starting
  with `*` makes both day fields must-match, as loopctl reads them;
- Kubernetes (robfig/cron): no `L`, `W`, `#`, weekdays 0-6, and only a bare
  `*` or `?` makes both day fields must-match (`*/2` ORs);
- GitHub: no `L`, `W`, `#`; how it combines two restricted day fields is
  not documented, so an expression that depends on it is refused;
- systemd: written from the expanded values (two `OnCalendar=` lines where
  the day fields OR).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from loopctl.domain.errors import UsageError
from loopctl.domain.schedule import plain_ranges
from loopctl.fast.data_class import record

MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
          "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
          "@hourly": "0 * * * *"}
FIELDS = ("minute", "hour", "day of month", "month", "day of week")
BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))
NAMES = {**{n: str(i) for i, n in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1)},
    **{n: str(i) for i, n in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}}
LABELS = {"crontab": "Debian's cron", "k8s": "a Kubernetes CronJob", "github": "GitHub Actions",
          "systemd": "systemd's OnCalendar="}
WAY_OUT = ("run the loop under loopctl's own driver (`loopctl daemon` or `loopctl cron "
           "install`), or give it a schedule without that form")
_PLAIN_PART = re.compile(r"\*(/[0-9]+)?|[0-9]+(-[0-9]+(/[0-9]+)?)?")


@record(frozen=True)
class CronForm:
    """One five-field expression: its fields as written (lower case, names as
    numbers, `?` as `*`) and the values loopctl fires on (weekdays 0-6)."""

    expr: str
    fields: tuple[str, ...]
    values: tuple[tuple[int, ...], ...]

    def full(self, index: int) -> bool:
        lo, hi = BOUNDS[index]
        return self.values[index] == tuple(range(lo, hi + 1))

    def starred(self, index: int) -> bool:
        return self.fields[index].startswith("*")

    @property
    def day_or(self) -> bool:
        return not self.starred(2) and not self.starred(4)


def refusal(form_expr: str, target: str, field: str, why: str) -> UsageError:
    return UsageError(f"cannot export cron {form_expr!r} --to {target}: its {field} {why}, "
                      f"which {LABELS[target]} cannot say; {WAY_OUT}")


def _numbered(text: str) -> str:
    return re.sub(r"[a-z]{3}", lambda m: NAMES.get(m.group(0), m.group(0)),
                  text.lower()).replace("?", "*")


def _special(field: str) -> str | None:
    """The part of a field no target's grammar shares (`L`, `W`, `#`, `R`, `H`)."""
    for part in field.split(","):
        if re.search(r"[^0-9*/-]", _numbered(part)):
            return part
    return None


def parse_form(expr: str, target: str) -> CronForm:
    """`expr` as fields and values; refused when it uses a form no export
    target can say (`L`, `W`, `#`, croniter's random `R` or hashed `H`)."""
    from croniter import croniter

    text = MACROS.get(expr.strip().lower(), expr)
    for index, field in enumerate(text.split()):
        odd = _special(field)
        if odd is not None:
            raise refusal(text, target, FIELDS[index], f"uses {odd!r}")
    fields = tuple(_numbered(f) for f in plain_ranges(text).split())
    expanded, _ = croniter.expand(" ".join(fields))
    values = []
    for index, got in enumerate(expanded):
        lo, hi = BOUNDS[index]
        found = range(lo, hi + 1) if "*" in got else {int(v) % 7 if index == 4 else int(v)
                                                      for v in got}
        values.append(tuple(sorted(found)))
    return CronForm(text, fields, tuple(values))


def _plain(field: str, index: int) -> bool:
    """Whether every cron reads `field` as croniter does: `*`, `*/S`,
    numbers, ascending ranges (no `N/S` alone, no wrap-around, no weekday 7)."""
    for part in field.split(","):
        if not _PLAIN_PART.fullmatch(part):
            return False
        numbers = [int(n) for n in re.findall(r"[0-9]+", part.split("/")[0])]
        if numbers != sorted(numbers) or (index == 4 and 7 in numbers):
            return False
    return True


def _runs(values: tuple[int, ...]) -> list[tuple[int, int]]:
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return [(a, b) for a, b in runs]


def _listed(values: tuple[int, ...]) -> str:
    """Values as cron ranges and lists: 1-5,7,9-11."""
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in _runs(values))


def _cron_field(form: CronForm, index: int) -> str:
    field = form.fields[index]
    return field if field == "*" or _plain(field, index) else _listed(form.values[index])


def cron_line(form: CronForm, target: str) -> str:
    """The expression as `target`'s cron reads it with loopctl's instants."""
    _check_days(form, target)
    fields = [_cron_field(form, i) for i in range(5)]
    for index, other in ((2, 4), (4, 2)):
        if form.starred(index) and not fields[index].startswith("*") and fields[other] != "*":
            raise refusal(form.expr, target, FIELDS[index],
                          f"{form.fields[index]!r} starts with * and lists more")
    return " ".join(fields)


def _check_days(form: CronForm, target: str) -> None:
    """Refuse where the target combines the two day fields otherwise."""
    if "*" in (form.fields[2], form.fields[4]):
        return  # one day field is a bare `*`: every cron ANDs, and it is all days
    if target == "github":
        raise refusal(form.expr, target, "day of month and day of week",
                      "are both restricted (how they combine is not documented)")
    if target == "k8s" and not form.day_or:
        raise refusal(form.expr, target, "day of month and day of week",
                      "need both to match (a field starting with *), which robfig/cron reads "
                      "as either")


# -- systemd ----------------------------------------------------------------------------

SYSTEMD_WEEK = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")  # its ranges run Mon..Sun


def _calendar_list(values: tuple[int, ...], full: bool) -> str:
    if full:
        return "*"
    return ",".join(f"{a:02d}" if a == b else f"{a:02d}..{b:02d}" for a, b in _runs(values))


def _weekdays(values: tuple[int, ...]) -> str:
    week = tuple(sorted((v - 1) % 7 for v in values))  # cron's Sunday 0 is systemd's last
    return ",".join(SYSTEMD_WEEK[a] if a == b else f"{SYSTEMD_WEEK[a]}..{SYSTEMD_WEEK[b]}"
                    for a, b in _runs(week))


def calendar_lines(form: CronForm, tz: str | None) -> list[str]:
    """`OnCalendar=` values firing the expression's instants: one line, or two
    where the day fields OR (a timer fires on the union of its lines)."""
    minute, hour, dom, month = (_calendar_list(form.values[i], form.full(i))
                                for i in (0, 1, 2, 3))
    zone = f" {tz}" if tz else ""
    time = f"{hour}:{minute}:00{zone}"
    if form.day_or:
        return [f"{_weekdays(form.values[4])} *-{month}-* {time}", f"*-{month}-{dom} {time}"]
    days = "" if form.full(4) else _weekdays(form.values[4]) + " "
    return [f"{days}*-{month}-{dom} {time}"]


# -- DST --------------------------------------------------------------------------------


def matches(form: CronForm, wall: datetime) -> bool:
    """Whether the wall time is one of the expression's (as loopctl reads it)."""
    v = form.values
    if wall.minute not in v[0] or wall.hour not in v[1] or wall.month not in v[3]:
        return False
    dom, dow = wall.day in v[2], (wall.weekday() + 1) % 7 in v[4]
    return (dom or dow) if form.day_or else (dom and dow)


def transitions(tz: str, year: int, years: int = 4) -> list[tuple[float, int, int]]:
    """The zone's offset changes from 1 January of `year` on: (instant, offset
    before, offset after), offsets in seconds."""
    from zoneinfo import ZoneInfo

    zone = ZoneInfo(tz)

    def offset(t: float) -> int:
        return int((datetime.fromtimestamp(t, zone).utcoffset() or timedelta(0)).total_seconds())

    found = []
    t = datetime(year, 1, 1, tzinfo=timezone.utc).timestamp()
    for _ in range(366 * years):
        if offset(t) != offset(t + 86400):
            lo, hi = t, t + 86400
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if offset(mid) == offset(t) else (lo, mid)
            found.append((hi, offset(t), offset(hi)))
        t += 86400
    return found


def _walls(instant: float, start: int, end: int) -> list[datetime]:
    """The wall minutes in [instant+start, instant+end) (seconds, UTC-naive)."""
    base = datetime.fromtimestamp(instant, timezone.utc).replace(tzinfo=None)
    return [base + timedelta(seconds=s) for s in range(start, end, 60)]


def dst_trouble(form: CronForm, tz: str, year: int, repeated: bool) -> str | None:
    """A wall time of the expression the target would fire otherwise than
    loopctl: one in a spring-forward gap (loopctl fires at the transition; a
    target that skips it, unless the first time after the gap is a slot
    anyway), or with `repeated`, one in a fall-back hour (loopctl fires once)."""
    for instant, before, after in transitions(tz, year):
        if after > before:
            if matches(form, _walls(instant, after, after + 60)[0]):
                continue
            hits = [w for w in _walls(instant, before, after) if matches(form, w)]
            what = "does not exist (the clocks spring forward)"
        elif repeated:
            hits = [w for w in _walls(instant, after, before) if matches(form, w)]
            what = "occurs twice (the clocks fall back)"
        else:
            continue
        if hits:
            return f"{hits[0]:%Y-%m-%d %H:%M} {what}"
    return None


def check_dst(form: CronForm, tz: str | None, target: str, repeated: bool,
              year: int | None = None) -> None:
    """Refuse a zone whose DST the target would read otherwise (DESIGN §3)."""
    if not tz or tz == "UTC":
        return
    trouble = dst_trouble(form, tz, year or datetime.now(timezone.utc).year, repeated)
    if trouble:
        raise UsageError(
            f"cannot export cron {form.expr!r} in {tz} --to {target}: {trouble} and "
            f"{LABELS[target]} would not fire it once as loopctl does; move the time out of "
            "the hours the clocks change, give the loop --tz UTC, or run it under loopctl's "
            "own driver")
