"""Human output: aligned tables, relative times, colour only on a terminal."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from loopctl.domain.durations import format_rough
from loopctl.domain.outcomes import MARKS  # one per outcome: `status` and `watch` show the same
from loopctl.domain.untrusted import line

STYLES = {"green": "32", "red": "31", "yellow": "33", "dim": "2", "bold": "1", "cyan": "36"}
STATUS_STYLE = {"active": "green", "running": "cyan", "paused": "yellow", "failed": "red",
                "queued": "cyan", "invalid": "red", "expired": "dim", "stopped": "dim",
                "completed": "green", "held": "yellow"}


def use_color(stream: Any = None) -> bool:
    stream = stream or sys.stdout
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def paint(text: str, style: str | None, color: bool | None = None) -> str:
    if not style or not (use_color() if color is None else color):
        return text
    return f"\x1b[{STYLES[style]}m{text}\x1b[0m"


def relative(ts: float | None, now: float) -> str:
    if ts is None:
        return "-"
    delta = ts - now
    if abs(delta) < 1:
        return "now"
    if delta > 0:
        return f"in {format_rough(delta)}"
    return f"overdue {format_rough(-delta)}"


def ago(ts: float | None, now: float) -> str:
    if ts is None:
        return "-"
    delta = now - ts
    return "just now" if delta < 1 else f"{format_rough(delta)} ago"


def terminal_width(stream: Any = None) -> int:
    """Columns for human output: a terminal's own width (an exported
    `COLUMNS` goes stale when the window is resized, and lines wider than
    the terminal wrap), else `COLUMNS` when set, else 80 (a pipe, a file,
    cron's mail)."""
    stream = stream or sys.stdout
    try:
        if stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns or 80
    except (AttributeError, OSError, ValueError):
        pass
    columns = os.environ.get("COLUMNS", "")
    if columns.isascii() and columns.isdigit() and int(columns) > 0:
        return int(columns)
    return 80


def table(headers: Sequence[str], rows: Sequence[Sequence[str]],
          styles: list[str | None] | None = None, width: int | None = None,
          keep: Sequence[int] = (0,), first: Sequence[int] = (),
          least: Mapping[int, int] | None = None, style_at: int = 2,
          drop: Sequence[int] = ()) -> str:
    """Columns padded to their widest cell. While the table is wider than
    `width` (default: the terminal's), the widest column not in `keep` gives
    up a character (cells end in "…"): free text is shortened, identifiers
    (the columns in `keep`: names, run ids) never are, so two different
    loops never print alike; a table of long names is wider instead. The
    columns in `first` (a reason, an error) give way before the others, down
    to their width in `least` (`failed…` of `failed: why`), then the rest.
    `styles` paints the cells of column `style_at`, a style a row. Before
    any cut, the columns in `drop` go whole, in that order, while the rest
    (`least` counted) is too wide (a whole column gone says more than every cell cut to `fail 1…`);
    indices are the given ones.
    Every cell is one sanitized line: a name or an error read from a
    hand-edited loops.yaml must not reach the terminal as escape sequences."""
    width = terminal_width() if width is None else width
    whole = all(len(row) == len(headers) for row in rows)
    if whole:  # a column at a time: `ls` of 10,000 loops has 60,000 cells
        columns = [_one_line(column) for column in zip(headers, *rows, strict=True)]
        natural = [max(map(len, column)) for column in columns]
    else:
        cells = [list(headers)] + [[line(cell) for cell in r] for r in rows]
        natural = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    gone = _gone(natural, drop, width, least or {}) if drop else []
    if gone:
        return _without(gone, headers, rows, styles, width, keep, first, least or {}, style_at)
    widths = _fitted(natural, width, keep, first, least or {})
    color = use_color()  # once: 10,000 rows would ask the terminal 10,000 times
    last = len(headers) - 1
    if not color and widths == natural and whole:
        # Nothing to cut or paint: one format per row, called from C.
        pattern = "  ".join([*(f"{{:<{w}}}" for w in widths[:last]), "{}"])
        return "\n".join(map(str.rstrip, map(pattern.format, *columns)))
    if whole:
        cells = [list(row) for row in zip(*columns, strict=True)]
    lines = []
    for n, row in enumerate(cells):
        parts = []
        for i, cell in enumerate(row):
            if len(cell) > widths[i]:
                cell = cell[: widths[i] - 1] + "…"
            text = cell.ljust(widths[i]) if i < last else cell
            style = "bold" if n == 0 else (styles[n - 1] if styles and i == style_at else None)
            parts.append(paint(text, style, color) if style and color else text)
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _gone(natural: Sequence[int], drop: Sequence[int], width: int,
          least: Mapping[int, int]) -> list[int]:
    """The columns of `drop` that go, in order, until the rest fits."""
    shown = {i: min(w, least.get(i, w)) for i, w in enumerate(natural)}
    gone: list[int] = []
    for i in drop:
        if sum(shown.values()) + 2 * (len(shown) - 1) <= width:
            break
        gone.append(i)
        del shown[i]
    return gone


def _without(gone: Sequence[int], headers: Sequence[str], rows: Sequence[Sequence[str]],
             styles: list[str | None] | None, width: int, keep: Sequence[int],
             first: Sequence[int], least: Mapping[int, int], style_at: int) -> str:
    """`table` of the columns not `gone`, the indices given moved with them."""
    kept = [i for i in range(len(headers)) if i not in gone]
    at = {old: new for new, old in enumerate(kept)}
    return table([headers[i] for i in kept], [[row[i] for i in kept] for row in rows], styles,
                 width, [at[i] for i in keep if i in at], [at[i] for i in first if i in at],
                 {at[i]: w for i, w in least.items() if i in at}, at.get(style_at, -1))


def _fitted(natural: list[int], width: int, keep: Sequence[int], first: Sequence[int],
            least: Mapping[int, int]) -> list[int]:
    widths = list(natural)
    while sum(widths) + 2 * (len(widths) - 1) > width:
        free = [i for i in first if widths[i] > max(4, least.get(i, 0))] \
            or [i for i in range(len(widths)) if i not in keep and widths[i] > 4]
        if not free:
            break
        widest = max(free, key=lambda i: widths[i])
        widths[widest] -= 1
    return widths


def _one_line(column: Sequence[Any]) -> list[str]:
    """`line` of every cell; one C check for a column with nothing to
    replace (`line` returns printable text as it is)."""
    try:
        if "".join(column).isprintable():
            return list(column)
    except TypeError:  # not all text
        pass
    return [line(cell) for cell in column]


def fit_line(fixed: Sequence[str], free: Sequence[str], width: int | None = None) -> str:
    """One line: the identifiers in `fixed` whole (run ids, branches, URLs),
    then the free text, shortened with "…" to what is left of `width`."""
    width = terminal_width() if width is None else width
    head = " ".join(part for part in fixed if part)
    tail = " ".join(part for part in free if part)
    if not tail:
        return head
    room = width - len(head) - 1
    if len(tail) > room:
        tail = tail[: room - 1] + "…" if room > 1 else "…"
    return f"{head} {tail}".rstrip()




def unicode_ok(encoding: str | None = None) -> bool:
    """Marks only on a UTF-8 terminal, none under NO_COLOR."""
    import locale

    if os.environ.get("NO_COLOR"):
        return False
    if encoding is None:
        encoding = getattr(sys.stdout, "encoding", None) or locale.getpreferredencoding(False)
    return "utf" in encoding.lower()


def outcome_strip(outcomes: Sequence[Any], unicode: bool | None = None) -> str:
    """Recent outcomes, oldest first, one mark each."""
    pick = 0 if (unicode_ok() if unicode is None else unicode) else 1
    return "".join(MARKS.get(str(o), ("·", "."))[pick] for o in outcomes)


def held_until(until: Any) -> str:
    """` until 14:05` after `held (rate_limited)`, in local time."""
    import time

    from loopctl.domain.timestamps import parse_iso

    moment = parse_iso(until) if isinstance(until, str) else until
    return time.strftime(" until %H:%M", time.localtime(moment)) if moment else ""


def relative_in(ts: float | None, now: float, seen: dict[int, str]) -> str:
    """`relative`, remembered by the whole seconds it writes (`seen`): a
    table of 10,000 loops holds far fewer distinct times than loops."""
    if ts is None:
        return "-"
    delta = ts - now
    if -1 < delta < 1:
        return "now"
    key = round(delta)  # what format_rough writes, with the sign of delta
    text = seen.get(key)
    if text is None:
        text = seen[key] = relative(ts, now)
    return text


SORTS = ("next", "last", "name")
INF = float("inf")


def picked(loops: list[dict[str, Any]], status: str | None, sort: str | None,
           ) -> list[dict[str, Any]]:
    """`ls --status S`: the loops `ls` shows as S; `--sort`: soonest next
    fire, latest last run or name first (loops with no time go last)."""
    if status:
        loops = [loop for loop in loops if loop["status"] == status]
    if sort == "next":
        return sorted(loops, key=lambda loop: loop.get("next_fire") or INF)
    if sort == "last":
        return sorted(loops, key=lambda loop: -(loop.get("last_end") or -INF))
    return sorted(loops, key=lambda loop: loop["name"]) if sort == "name" else loops


def queue_places(loops: list[dict[str, Any]]) -> dict[str, str]:
    """`slot 2/3` for each queued loop: the oldest due fires first when a
    slot frees (domain/capacity.admit), ties by name."""
    queued = sorted((loop.get("next_fire") or 0.0, loop["name"]) for loop in loops
                    if loop["status"] == "queued")
    return {name: f"slot {at}/{len(queued)}" for at, (_, name) in enumerate(queued, 1)}


LS_HEADERS = ["NAME", "SCHEDULE", "STATUS", "RUNS", "NEXT", "LAST"]


def ls_table(loops: list[dict[str, Any]], now: float, width: int | None = None) -> str:
    """One row a loop. A narrow terminal first cuts LAST's reason (never
    its outcome: `failed…`), then drops SCHEDULE (`show` has it), RUNS and
    NEXT whole, before a cell of any other column is cut."""
    rows, styles = [], []
    seen: dict[int, str] = {}
    place = queue_places(loops)
    outcome = 1  # LAST's widest outcome word, the part never cut
    for loop in loops:
        kind = loop["status"]
        reason, until = loop.get("reason"), loop.get("until")
        status = f"{kind} ({reason})" if reason else kind
        if until:
            status += held_until(until)
        if kind == "invalid":
            rows.append([loop["name"], "-", status, "-", "-", loop["error"]])
        else:
            last = loop["last_outcome"] or "-"
            if loop.get("last_reason"):  # free text: the first thing a narrow table cuts
                outcome = max(outcome, len(last) + 1)
                last = f"{last}: {loop['last_reason']}"
            nxt = place[loop["name"]] if kind == "queued" \
                else relative_in(loop["next_fire"], now, seen)
            rows.append([loop["name"], loop["schedule"], status,
                         f"{loop['used']}/{loop['limit'] or '∞'}", nxt, last])
        styles.append(STATUS_STYLE.get(kind))
    if any("machine" in loop for loop in loops):  # a team store's home (DESIGN §21)
        return _with_machine(loops, rows, styles, width, outcome)
    shown = table(LS_HEADERS, rows, styles, width=width, first=(5,), least={5: outcome},
                  drop=(1, 3, 4))
    return shown + invalid_reasons(loops, shown, width)


def _with_machine(loops: list[dict[str, Any]], rows: list[list[str]],
                  styles: list[str | None], width: int | None, outcome: int) -> str:
    """The `ls` table with MACHINE before LAST: the machine of the run in
    flight, else of the last run (a name from the store, shown as a line)."""
    from loopctl.domain.untrusted import line

    for loop, row in zip(loops, rows, strict=True):
        row.insert(5, line(str(loop.get("machine") or "-")))
    shown = table([*LS_HEADERS[:5], "MACHINE", "LAST"], rows, styles, width=width,
                  keep=(0, 5), first=(6,), least={6: outcome}, drop=(1, 3, 4))
    return shown + invalid_reasons(loops, shown, width)


def invalid_reasons(loops: list[dict[str, Any]], shown: str, width: int | None) -> str:
    """An invalid entry's error is its one useful cell: when the table cut
    it, it follows the table whole, wrapped (issue 51)."""
    import textwrap

    from loopctl.domain.untrusted import line

    room = max(terminal_width() if width is None else width, 40)
    out = []
    for loop in loops:
        error = line(str(loop.get("error") or ""))
        if loop["status"] == "invalid" and error and error not in shown:
            out += textwrap.wrap(f"invalid {line(loop['name'])}: {error}", room,
                                 subsequent_indent="  ", break_on_hyphens=False)
    return "".join("\n" + row for row in out)
