"""The run log's bound (`--max-log`, DESIGN §14).

The agent writes into a pipe; a thread of the supervisor moves the bytes
into the log with splice(2), kernel to kernel, so no byte is copied through
Python, up to the bound, and past it into /dev/null: the agent goes on
writing and never sees an error (RLIMIT_FSIZE would kill it with SIGXFSZ or
fail its writes with EFBIG). Measured by bench/flood.py (bench/README.md).

splice refuses a file opened with O_APPEND (EINVAL), and the supervisor's
log descriptor appends, so the pump writes through a second open file
description of the same inode, reached through /proc/self/fd: the open
file, never the path the agent might have replaced.
"""

from __future__ import annotations

import fcntl
import os
import threading

CHUNK = 1024 * 1024
PIPE_SIZE = 1024 * 1024  # fewer wake-ups per MiB than the 64 KiB default


def note_line(limit: int) -> str:
    from loopctl.domain.sizes import format_size

    return f"# loopctl: log truncated at {format_size(limit)}"


class LogPump:
    """Agent output -> log (at most `limit` bytes) -> /dev/null."""

    def __init__(self, log_fd: int, limit: int) -> None:
        self.limit = limit
        self.written = 0
        self.truncated = False
        self.error: str | None = None
        read_end, self.write_end = os.pipe2(os.O_CLOEXEC)
        self._read_end = read_end
        try:
            fcntl.fcntl(self.write_end, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        except OSError:
            pass  # over /proc/sys/fs/pipe-max-size for this user: the default works
        self._out = os.open(f"/proc/self/fd/{log_fd}", os.O_WRONLY | os.O_CLOEXEC)
        os.lseek(self._out, 0, os.SEEK_END)
        self._thread = threading.Thread(target=self._pump, name="logcap", daemon=True)

    def start(self) -> None:
        """After the agent is spawned: our copy of the write end closes, so
        the pipe ends when the agent and everything it started are gone."""
        os.close(self.write_end)
        self._thread.start()

    def _pump(self) -> None:
        try:
            self._copy()
        except OSError as exc:
            # A full disk (ENOSPC) stops the log, not the run: drain the rest.
            self.error = exc.strerror
            self._discard()
        finally:
            os.close(self._read_end)
            os.close(self._out)

    def _copy(self) -> None:
        while self.written < self.limit:
            moved = os.splice(self._read_end, self._out, min(CHUNK, self.limit - self.written))
            if moved == 0:
                return
            self.written += moved
        self._discard()

    def _discard(self) -> None:
        null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        try:
            while True:
                try:
                    moved = os.splice(self._read_end, null, CHUNK)
                except OSError:
                    return
                if moved == 0:
                    return
                if self.error is None:
                    self.truncated = True
        finally:
            os.close(null)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)


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
