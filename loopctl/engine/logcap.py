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


def note_line(limit: int) -> str:
    from loopctl.domain.sizes import format_size

    return f"# loopctl: log truncated at {format_size(limit)}"


class LogTrim:
    """Keeps the log at most `limit` bytes while the agent writes into it."""

    def __init__(self, log_fd: int, limit: int) -> None:
        self.fd = log_fd
        self.limit = limit
        self.truncated = False
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="logcap", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _trim(self) -> float:
        """Cut the log back to the bound if it is past it; the next wait."""
        size = os.fstat(self.fd).st_size
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

    def __init__(self, log_fd: int, limit: int) -> None:
        self.log_fd = log_fd
        self.limit = self.left = limit
        self.truncated = False

    def write(self, chunk: bytes) -> None:
        if self.left <= 0:
            self.truncated = self.truncated or bool(chunk)
            return
        piece = chunk[: self.left]
        os.write(self.log_fd, piece)
        self.left -= len(piece)
        if len(piece) < len(chunk):
            self.truncated = True
