"""`loopctl watch`: a live view of every loop, refreshed every few seconds.

Each refresh only reads: `reading.list_loops` (no lock, no write) plus the last
4 KiB of each in-flight run's log. `render` is pure (data and `now` in, lines
out) so it is tested with a fixed clock; `main` owns the terminal: Rich
`Live`, stdin in cbreak mode, signals, and putting all of it back on exit.
"""

from __future__ import annotations

import os
import re
import select
import signal
import stat
import sys
import textwrap
import time
import unicodedata
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from loopctl.cli.render import (
    STATUS_STYLE,
    held_until,
    outcome_strip,
    relative,
    terminal_width,
    unicode_ok,
)
from loopctl.domain.durations import format_rough
from loopctl.domain.errors import EXIT_INTERRUPTED, EXIT_OK, LoopctlError
from loopctl.domain.untrusted import line
from loopctl.fast.data_class import record
from loopctl.storage.store import Store

LOG_TAIL_BYTES = 4096
MAX_ERROR_LINES = 3
HEADERS = ("NAME", "STATUS", "NEXT", "RUNS", "LAST", "RECENT", "REASON")
REASON, RECENT = 6, 5
MIN_REASON = 16  # narrower, a reason says nothing: it goes on the line below

# Agent output is untrusted: every shown field goes through the one
# sanitizer (loopctl.domain.untrusted.line). A log's last line is found by
# splitting on every break a terminal honours, a bare CR included.
_LINE_BREAKS = re.compile(r"[\r\n\v\f\x85\u2028\u2029]")


@record(frozen=True)
class Row:
    """One LOOP object (README "The LOOP object") and, while a run is in
    flight, the last non-empty line of its log."""

    loop: dict[str, Any]
    log_line: str | None = None


@record(frozen=True)
class Line:
    """One line of the view; `style` (a Rich style name) covers text[start:end]."""

    text: str
    style: str | None = None
    start: int = 0
    end: int | None = None


# -- text that fits ---------------------------------------------------------------


def clean(text: str) -> str:
    """`text` as one line the terminal shows as written (see `untrusted.line`)."""
    return line(text)


def char_cells(char: str) -> int:
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def cells(text: str) -> int:
    """Terminal columns `text` takes (wide CJK characters take two)."""
    return sum(char_cells(c) for c in text)


def cut(text: str, width: int, ellipsis: str = "…") -> str:
    """`text` in at most `width` columns, ending in `ellipsis` when cut."""
    if cells(text) <= width:
        return text
    room, out = width - cells(ellipsis), []
    for char in text:
        room -= char_cells(char)
        if room < 0:
            break
        out.append(char)
    return "".join(out) + ellipsis if width >= cells(ellipsis) else ""


def pad(text: str, width: int) -> str:
    return text + " " * max(width - cells(text), 0)


# -- the pure view --------------------------------------------------------------------


def render(rows: Sequence[Row], now: float, width: int, *, unicode: bool = False,
           error: str | None = None) -> list[Line]:
    """The table of loops (or the error that stopped this refresh), each line
    at most `width` columns."""
    ellipsis = "…" if unicode else "..."
    if error is not None:
        wrapped = textwrap.wrap(f"error: {clean(error)}", max(width, 20))
        return [Line(cut(text, width, ellipsis), "red") for text in wrapped[:MAX_ERROR_LINES]]
    if not rows:
        return [Line(cut("no loops yet. Try:  loopctl start --every 10m --name hello "
                         "'echo hello'", width, ellipsis))]
    table, widths = layout(rows, now, width, unicode)
    header = fitted(table[0], widths, ellipsis)
    lines = [Line(cut("  ".join(header).rstrip(), width, ellipsis), "bold")]
    for row, cells_ in zip(rows, table[1:], strict=True):
        parts = fitted(cells_, widths, ellipsis)
        start = len(parts[0]) + 2  # the STATUS column, in characters (Rich counts those)
        lines.append(Line(cut("  ".join(parts).rstrip(), width, ellipsis),
                          STATUS_STYLE.get(row.loop.get("status") or ""),
                          start, start + len(parts[1].rstrip())))
        detail = detail_line(row, now, unicode) \
            or (None if len(widths) > REASON else reason_line(row, cells_, unicode))
        if detail:
            lines.append(Line(cut(detail, width, ellipsis), "dim"))
    return lines


def layout(rows: Sequence[Row], now: float, width: int,
           unicode: bool) -> tuple[list[list[str]], list[int]]:
    """The cells and column widths. REASON is left out when it has no room
    (each reason then goes on its loop's second line); when STATUS would be
    cut, it says the status alone (`paused`): its reason is on that line."""
    table = [list(HEADERS)] + [cells_of(row.loop, now, unicode) for row in rows]
    widths = fit_columns(table, width)
    if widths[REASON] >= MIN_REASON and any(r[REASON] for r in table[1:]):
        return table, widths
    table = [r[:REASON] for r in table]
    widths = fit_columns(table, width)
    if widths[1] < max(cells(r[1]) for r in table):
        table = [table[0]] + [[r[0], r[1].split(" (")[0], *r[2:]] for r in table[1:]]
        widths = fit_columns(table, width)
    return table, widths


def reason_line(row: Row, shown: list[str], unicode: bool) -> str | None:
    """Without a REASON column: the status's reason, cut from STATUS, and
    why the last run ended."""
    arrow = "↳" if unicode else ">"
    cut_reason = row.loop.get("reason") if " (" not in shown[1] else None
    said = [str(part) for part in (cut_reason, reason_of(row.loop)) if part]
    return f"  {arrow} {clean('; '.join(said))}" if said else None


def cells_of(loop: dict[str, Any], now: float, unicode: bool) -> list[str]:
    name = clean(str(loop.get("name")))
    if loop.get("status") == "invalid":
        return [name, "invalid", "-", "-", "-", "", ""]
    status = loop["status"] + (f" ({loop['reason']})" if loop.get("reason") else "")
    if loop["status"] == "held":
        status += held_until(loop.get("rate_limited_until"))
    limit = loop["runs"]["limit"]
    used = str(loop["runs"]["used"])
    runs = f"{used}/{limit}" if limit else (f"{used}/∞" if unicode else used)
    last = (loop.get("last_run") or {}).get("outcome") or "-"
    return [name, clean(status), relative(timestamp(loop.get("next_fire")), now),
            runs, clean(str(last)), outcome_strip(loop.get("recent_outcomes") or [], unicode),
            reason_of(loop)]


def reason_of(loop: dict[str, Any]) -> str:
    """Why the last run ended as it did, else the loop's own note."""
    reason = (loop.get("last_run") or {}).get("reason") or loop.get("note") or ""
    return clean(str(reason))


def detail_line(row: Row, now: float, unicode: bool) -> str | None:
    """The second line of a loop: why it is invalid, or the run in flight."""
    loop, arrow = row.loop, "↳" if unicode else ">"
    if loop.get("status") == "invalid":
        return f"  {arrow} {clean(str(loop.get('error') or 'invalid entry'))}"
    run = loop.get("current_run")
    if loop.get("status") == "held":  # the fix first: the line is cut at the width
        held = loop.get("held") or {}
        return f"  {arrow} {clean(str(held.get('fix') or loop.get('note') or ''))}"
    if not run:
        return None
    started = timestamp(run.get("started_at"))
    elapsed = format_rough(max(now - started, 0)) if started is not None else "starting"
    shown = row.log_line if row.log_line else "(no output yet)"
    return f"  {arrow} {elapsed}  {clean(shown)}"


def fit_columns(table: list[list[str]], width: int) -> list[int]:
    """Natural column widths; while the row is wider than `width`, RECENT
    gives up columns first (down to its header: the newest outcomes), then
    REASON (to nothing: then it is left out), then the widest column but NAME (as
    `render.table` does for `ls`): two loops never show the same name, and
    STATUS is cut last; a name wider than the terminal leaves less room for
    the rest of its row instead."""
    widths = [max(cells(clean(row[i])) for row in table) for i in range(len(table[0]))]
    for column, least in ((RECENT, len("RECENT")), (REASON, 0))[:len(widths) - RECENT]:
        over = sum(widths) + 2 * (len(widths) - 1) - width
        widths[column] = max(widths[column] - max(over, 0), min(widths[column], least))
    while sum(widths) + 2 * (len(widths) - 1) > width:
        free = [i for i in range(1, len(widths)) if widths[i] > 4]
        if not free:
            break
        widest = max(free, key=lambda i: widths[i])
        widths[widest] -= 1
    return widths


def fitted(row: Sequence[str], widths: Sequence[int], ellipsis: str) -> list[str]:
    """Each cell cut to its width; RECENT (oldest first) keeps its newest."""
    out = [pad(cut(clean(cell), w, ellipsis), w) for cell, w in zip(row, widths, strict=True)]
    if len(row) > RECENT and row[RECENT] != "RECENT" and cells(row[RECENT]) > widths[RECENT]:
        out[RECENT] = row[RECENT][len(row[RECENT]) - widths[RECENT]:]
    return out


def timestamp(text: Any) -> float | None:
    from loopctl.domain.timestamps import parse_iso

    if not isinstance(text, str):
        return None
    try:
        return parse_iso(text)
    except (ValueError, OverflowError):
        return None


def title(now: float, interval: float, width: int) -> Line:
    clock_text = time.strftime("%H:%M:%S", time.localtime(now))
    return Line(cut(f"loopctl watch  {clock_text}  every {interval:g}s  q quits", width),
                "bold")


# -- reading (no writes, no locks) ------------------------------------------------


def gather(store: Store) -> tuple[list[Row], str | None]:
    """Every loop with its in-flight log line, or ([], the error) when the
    files cannot be read right now (a damaged file must not end the watch)."""
    from loopctl.commands import views as reading

    try:
        loops = reading.list_loops(store)
    except Exception as exc:  # shown in the view; the next refresh retries
        return [], one_line(exc)
    return [Row(loop, last_log_line(store, loop)) for loop in loops], None


def one_line(exc: BaseException) -> str:
    text = exc.message if isinstance(exc, LoopctlError) else f"{type(exc).__name__}: {exc}"
    return " ".join(clean(text).split())


def last_log_line(store: Store, loop: dict[str, Any]) -> str | None:
    run = loop.get("current_run")
    if not run:
        return None
    from loopctl.storage import runs

    try:
        path = store.paths.run_log(str(loop.get("name")), str(run.get("run_id")))
    except LoopctlError:
        return None
    if runs.loop_folder(store.paths, str(loop.get("name"))) is None:
        return None
    data = tail(path)
    return last_line(data) if data is not None else None


def tail(path: Path, limit: int = LOG_TAIL_BYTES) -> bytes | None:
    """The last `limit` bytes of a regular file (logs can be gigabytes), never
    through a symlink; None when there is no such file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        os.lseek(fd, max(info.st_size - limit, 0), os.SEEK_SET)
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def last_line(data: bytes) -> str | None:
    """The last line with something visible in it. A carriage return ends a
    line too: a progress bar shows what follows its last one."""
    for raw in reversed(_LINE_BREAKS.split(data.decode("utf-8", "replace"))):
        line = clean(raw).strip()
        if line:
            return line
    return None


# -- the terminal ---------------------------------------------------------------------


def main(store: Store, interval: float = 2.0) -> int:
    if not sys.stdout.isatty():
        return print_snapshot(store)
    from loopctl.collector import long_lived

    long_lived()  # off for start-up (loopctl.entry); a screen may stay open for days
    try:
        return live(store, interval)
    except KeyboardInterrupt:  # before our SIGINT handler was in place
        return EXIT_INTERRUPTED


def use_unicode(encoding: str | None) -> bool:
    """As `loopctl status`: marks only on a UTF-8 terminal, none under NO_COLOR."""
    return unicode_ok(encoding or "")


def print_snapshot(store: Store) -> int:
    """Not a terminal: the table once, as plain text. Unreadable files raise
    (one line and exit 3 from the CLI's error path, as `ls`)."""
    from loopctl import clock
    from loopctl.commands import views as reading

    loops = reading.list_loops(store)
    rows = [Row(loop, last_log_line(store, loop)) for loop in loops]
    lines = render(rows, clock.now(), terminal_width(sys.stdout),
                   unicode=use_unicode(getattr(sys.stdout, "encoding", None)))
    print("\n".join(line.text for line in lines), flush=True)
    return EXIT_OK


def live(store: Store, interval: float) -> int:
    from rich.console import Console, Group
    from rich.live import Live

    from loopctl import clock

    console = Console(highlight=False)
    unicode = use_unicode(console.encoding)

    def frame() -> Group:
        rows, error = gather(store)
        # The terminal's own width, each frame: Rich trusts COLUMNS, and a
        # stale one made every row wrap and pushed the header off (issue 29).
        console.width = width = terminal_width(sys.stdout)
        now = clock.now()
        lines = [title(now, interval, width)]
        lines += render(rows, now, width, unicode=unicode, error=error)
        return Group(*(to_text(line) for line in lines))

    with keyboard() as keys, Live(console=console, auto_refresh=False,
                                  redirect_stdout=False, redirect_stderr=False) as view:
        while True:
            view.update(frame(), refresh=True)
            code = keys.wait(interval)
            if code is not None:
                return code


def to_text(line: Line) -> Any:
    """A Rich Text: never parsed as markup, never wrapped."""
    from rich.text import Text

    text = Text(line.text, no_wrap=True, overflow="crop")
    if line.style:
        text.stylize(line.style, line.start, line.end)
    return text


class Keyboard:
    """Waits for the next refresh, `q`, or a signal (SIGINT, SIGTERM, SIGHUP)."""

    def __init__(self, stdin: int | None, wake: int) -> None:
        self.stdin = stdin
        self.wake = wake
        self.signalled = False

    def wait(self, timeout: float) -> int | None:
        """An exit code when it is time to quit, else None after `timeout`."""
        deadline = time.monotonic() + timeout
        while not self.signalled:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            fds = [self.wake] + ([self.stdin] if self.stdin is not None else [])
            ready, _, _ = select.select(fds, [], [], left)
            if self.stdin is not None and self.stdin in ready and self.read_quit():
                return EXIT_OK
        return EXIT_INTERRUPTED

    def read_quit(self) -> bool:
        try:
            data = os.read(self.stdin, 1024) if self.stdin is not None else b""
        except OSError:
            data = b""
        if not data:
            self.stdin = None  # end of input: only signals and the clock from now on
        return b"q" in data.lower()


@contextmanager
def keyboard() -> Iterator[Keyboard]:
    """stdin in cbreak mode (keys arrive one by one, not echoed; Ctrl-C still
    signals) and signal handlers that wake `Keyboard.wait`; both undone on
    every way out."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    keys = Keyboard(None, wake_r)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        keys.signalled = True
        try:
            os.write(wake_w, b"!")
        except OSError:
            pass  # the pipe is full: the flag is already set

    previous: dict[signal.Signals, Any] = {}
    fd, saved = stdin_fd(), None
    try:
        # Handlers first: a Ctrl-C from here on cannot leave the terminal in cbreak.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, on_signal)
        saved = cbreak(fd) if fd is not None else None
        keys.stdin = fd
        yield keys
    finally:
        if fd is not None and saved is not None:
            restore(fd, saved)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(wake_r)
        os.close(wake_w)


def stdin_fd() -> int | None:
    try:
        return sys.stdin.fileno() if sys.stdin is not None else None
    except (OSError, ValueError):
        return None


def cbreak(fd: int) -> list[Any] | None:
    """Put a terminal on `fd` in cbreak mode; its previous mode, or None."""
    import termios
    import tty

    if not os.isatty(fd):
        return None
    try:
        saved = termios.tcgetattr(fd)
        tty.setcbreak(fd, termios.TCSANOW)
    except (termios.error, OSError):
        return None
    return saved


def restore(fd: int, saved: list[Any]) -> None:
    import termios

    try:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
    except (termios.error, OSError):
        pass  # the terminal is gone (SIGHUP): nothing left to restore
