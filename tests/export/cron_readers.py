"""How each export target reads a cron line, written from its own sources,
not from loopctl's code: Debian's cron (crontab(5), Vixie cron's entry.c:
`a/S` alone is no grammar, weekday 7 is Sunday, a day field starting with
`*` sets DOM_STAR/DOW_STAR and then both must match), and robfig/cron v3 as
Kubernetes runs it (parser.go: weekday 0-6, `N/S` is `N-max/S`, only a bare
`*` or `?`, or a step of 1, keeps the star bit, and with neither star bit
the day fields OR). Wall times only: the zone is the caller's business."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import date, datetime

BOUNDS = {"debian": ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7)),
          "robfig": ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))}
NAMES = {n: i for i, n in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug",
                                     "sep", "oct", "nov", "dec"), 1)}
NAMES.update({n: i for i, n in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))})


class Refused(ValueError):
    """The target's parser rejects the line."""


def _number(text: str, lo: int, hi: int) -> int:
    value = NAMES[text.lower()] if text.lower() in NAMES else int(text) \
        if re.fullmatch(r"[0-9]+", text) else None
    if value is None or not lo <= value <= hi:
        raise Refused(text)
    return value


def _part(part: str, lo: int, hi: int, dialect: str) -> tuple[set[int], bool]:
    """One comma part: its values, and whether it keeps the star bit."""
    base, slash, step_text = part.partition("/")
    step = _number(step_text, 1, 10_000) if slash else 1
    if base in ("*", "?") if dialect == "robfig" else base == "*":
        start, end, star = lo, hi, step == 1 or dialect == "debian"
    elif "-" in base:
        a, b = base.split("-", 1)
        start, end, star = _number(a, lo, hi), _number(b, lo, hi), False
    else:
        start = end = _number(base, lo, hi)
        star = False
        if slash:
            if dialect == "debian":
                raise Refused(part)  # a single number ends the range: `/` is a syntax error
            end = hi
    if start > end:
        raise Refused(part)
    return set(range(start, end + 1, step)), star


def parse(line: str, dialect: str) -> tuple[list[set[int]], bool]:
    """Five fields' values (weekday 7 as 0) and whether the day fields OR."""
    fields = line.split()
    if len(fields) != 5:
        raise Refused(line)
    values, stars = [], []
    for index, field in enumerate(fields):
        lo, hi = BOUNDS[dialect][index]
        found, star = set(), False
        for n, part in enumerate(field.split(",")):
            got, part_star = _part(part, lo, hi, dialect)
            found |= got
            star = star or (part_star and (n == 0 or dialect == "robfig"))
        if dialect == "debian":
            star = field.startswith("*")
        values.append({v % 7 for v in found} if index == 4 else found)
        stars.append(star)
    return values, not (stars[2] or stars[4])


def wall_times(line: str, dialect: str, after: datetime) -> Iterator[datetime]:
    """The line's wall times strictly after `after`, in order."""
    values, day_or = parse(line, dialect)
    minutes, hours, doms, months, dows = values
    times = sorted((h, m) for h in hours for m in minutes)
    day = after.date()
    while day.year < 2200:
        dom, dow = day.day in doms, (day.weekday() + 1) % 7 in dows
        if day.month in months and ((dom or dow) if day_or else (dom and dow)):
            for h, m in times:
                wall = datetime(day.year, day.month, day.day, h, m)
                if wall > after:
                    yield wall
        day = date.fromordinal(day.toordinal() + 1)
    return


def first(line: str, dialect: str, after: datetime, count: int,
          until: datetime) -> list[datetime]:
    out = []
    for wall in wall_times(line, dialect, after):
        if wall >= until or len(out) == count:
            break
        out.append(wall)
    return out


