"""The run log's bound (`--max-log`, DESIGN §14).

Scheduled runs keep the agent writing straight into the log (no byte
through Python, no extra copy): the log is opened with O_APPEND, so once a
watcher thread of the supervisor sees the file past the bound it cuts it
back to exactly the bound with ftruncate, and every later write of the
agent lands at the new end, to be cut again. The agent never sees an error
(RLIMIT_FSIZE would kill it with SIGXFSZ or fail its writes with EFBIG),
the first SIZE bytes are kept as written, and the disk holds at most the
bound plus what the agent writes between two looks (every 5 ms once past
it: ~5 MiB at 1 GiB/s). Measured against a pipe + splice(2) pump, which
costs a second kernel copy of every byte (bench/logcap.py, bench/README.md).
"""

from __future__ import annotations

import os
import threading

# How often the watcher looks: rarely while the log is small, often once
# it is near the bound or past it (an ftruncate is cheap; disk is not).
SLOW, NEAR, PAST = 0.1, 0.01, 0.005


def note_line(limit: int, lines: int | None = None) -> str:
    if lines is not None:
        return f"# loopctl: log truncated at {lines} lines"
    from loopctl.domain.sizes import format_size

    return f"# loopctl: log truncated at {format_size(limit)}"


class LineCount:
    """`--max-output-lines`: where the Nth line of the agent's output ends,
    once it has; the byte bound becomes that place."""

    def __init__(self, lines: int | None, start: int) -> None:
        self.lines, self.seen, self.at = lines, 0, start
        self.cut: int | None = None

    def feed(self, data: bytes) -> int | None:
        """The bytes `data` (the output from `at` on) may keep, or None: all."""
        if self.lines is None or self.cut is not None:
            return None if self.cut is None else max(0, self.cut - self.at)
        found, end = self.seen + data.count(b"\n"), len(data)
        if found >= self.lines:
            end = -1
            for _ in range(self.lines - self.seen):
                end = data.index(b"\n", end + 1)
            end += 1
            self.cut = self.at + end
        self.seen, self.at = min(found, self.lines), self.at + len(data)
        return end if self.cut is not None else None


class LogTrim:
    """Keeps the log at most `limit` bytes while the agent writes into it."""

    def __init__(self, log_fd: int, limit: int, lines: int | None = None) -> None:
        self.fd = log_fd
        self.limit = limit
        self.count = LineCount(lines, 0)  # loopctl's own lines are held to the end
        self.truncated = False
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="logcap", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _trim(self) -> float:
        """Cut the log back to the bound if it is past it; the next wait."""
        size = os.fstat(self.fd).st_size
        if self.count.lines is not None and self.count.cut is None and size > self.count.at:
            self.count.feed(os.pread(self.fd, size - self.count.at, self.count.at))
            if self.count.cut is not None:
                self.limit = min(self.limit, self.count.cut)
        if size > self.limit:
            os.ftruncate(self.fd, self.limit)
            self.truncated = True
            return PAST
        return NEAR if size > self.limit // 2 else SLOW

    def _watch(self) -> None:
        wait = SLOW
        while not self._stop.wait(wait):
            try:
                wait = self._trim()
            except OSError as exc:
                self.error = exc.strerror
                return

    def stop(self) -> None:
        """After the agent and everything it started are gone: a last cut."""
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            self._trim()
        except OSError as exc:
            self.error = self.error or exc.strerror


class CappedCopy:
    """The foreground tee's half of the bound: it copies through Python
    anyway (to the terminal too), so it counts there."""

    def __init__(self, log_fd: int, limit: int, lines: int | None = None) -> None:
        self.log_fd = log_fd
        self.limit = self.left = limit
        self.count = LineCount(lines, 0)
        self.truncated = False

    def write(self, chunk: bytes) -> None:
        keep = self.count.feed(chunk)
        if keep is not None and keep < len(chunk):
            self.truncated = True
            chunk = chunk[:keep]
        if self.left <= 0:
            self.truncated = self.truncated or bool(chunk)
            return
        piece = chunk[: self.left]
        os.write(self.log_fd, piece)
        self.left -= len(piece)
        if len(piece) < len(chunk):
            self.truncated = True
