"""The one bounded subprocess runner and the one detached delivery (DESIGN
§10, §15). Every short command loopctl runs beside its own work goes
through `run` (or `start` + `Running.finish`): git, gh, the attention hook,
the notification sender, crontab, the agents' version probes, the gate and
the check. What each caller keeps is its bounds, its words and its exit
codes; what they all get from here:

- argv only, never a shell (a caller that wants one passes a shell's argv);
- stdin /dev/null or the bytes given, written while the output is read, so
  a child that answers before reading everything cannot deadlock;
- the environment and working directory the caller names, nothing implied;
- a deadline: the process, and with `session` everything in its session,
  gets SIGTERM, then SIGKILL after `grace` (0: SIGKILL at once);
- stdout kept to `out_limit` bytes (its start, or with `keep_tail` its
  end) and stderr to `err_limit` (its end); the result says when more came;
- `preexec` run between fork and exec (the run's cgroup, a sandbox).

`detach` starts a process that outlives the caller (hook and notification
deliveries): its payload on stdin through an unnamed 0600 file, never argv
(`ps` shows argv to everyone, and 128 KiB fails with E2BIG) and never a pipe
a slow reader could stall.
"""

from __future__ import annotations

import os
import select
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from loopctl.fast.data_class import record

READ_SLICE = 0.2  # how often a silent command is checked for having exited
# Bytes read after it exited, with `linger`, before giving up on a child
# that holds the pipe open.
LINGER_BYTES = 1 << 20
AFTER_KILL = 1.0  # seconds spent reading what was left in the pipe after a kill
_STDERR = {"pipe": subprocess.PIPE, "stdout": subprocess.STDOUT, "null": subprocess.DEVNULL}


@record
class Result:
    exit_code: int | None  # None: ended by a signal, or killed at the deadline
    signal: int | None  # the signal that ended it
    timed_out: bool
    out: bytes
    err: bytes  # b"" with stderr "stdout" (it is in `out`) or "null"
    truncated: bool  # more stdout came than its bound
    err_truncated: bool
    duration_s: float

    @property
    def returncode(self) -> int:
        """Popen's view: the exit code, or minus the signal."""
        return self.exit_code if self.exit_code is not None else -(self.signal or 0)

    @property
    def status(self) -> int:
        """A shell's view of how it ended: the exit code, or 128 + signal."""
        return self.exit_code if self.exit_code is not None else 128 + (self.signal or 0)


class Capture:
    """One pipe's bytes, never more than `limit` of them in memory."""

    def __init__(self, limit: int, keep_tail: bool) -> None:
        self.limit, self.keep_tail = limit, keep_tail
        self.data = bytearray()
        self.cut = False

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > self.limit:
            self.cut = True
            if self.keep_tail:
                del self.data[: len(self.data) - self.limit]
            else:
                del self.data[self.limit:]


def kill_group(proc: subprocess.Popen[bytes], grace: float, session: bool = True) -> None:
    """SIGTERM its session (or it alone), SIGKILL after `grace` what is
    left (at once with no grace); it is reaped."""
    if grace > 0:
        _signal(proc, signal.SIGTERM, session)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    _signal(proc, signal.SIGKILL, session)  # after it exited: what it left in its group
    proc.wait()


def _signal(proc: subprocess.Popen[bytes], sig: int, session: bool) -> None:
    if session:
        try:
            os.killpg(proc.pid, sig)
            return
        except OSError:
            pass  # the group is gone
    if proc.poll() is None:
        proc.send_signal(sig)


class Running:
    """A started command: `finish` reads it to its end or its deadline."""

    def __init__(self, proc: subprocess.Popen[bytes], began: float, timeout: float,
                 stdin: bytes | None, out: Capture, err: Capture, linger: float | None,
                 kill: Callable[[subprocess.Popen[bytes]], object]) -> None:
        self.proc, self.began, self.deadline = proc, began, began + timeout
        self.stdin, self.out, self.err, self.linger = stdin, out, err, linger
        self.kill = kill

    def finish(self) -> Result:
        """Read until its output ends (with `linger`: until it exited and
        the pipes went quiet) or the deadline; killed at the deadline."""
        reader = _Reader(self)
        try:
            timed_out = reader.read()
            if not timed_out:  # its output ended; it may still be running
                try:
                    self.proc.wait(timeout=max(self.deadline - time.monotonic(), 0.01))
                except subprocess.TimeoutExpired:
                    timed_out = True
            if timed_out:
                self.kill(self.proc)
                reader.read_left()
            code = self.proc.wait()
        finally:
            reader.close()
        return Result(None if timed_out or code < 0 else code, -code if code < 0 else None,
                      timed_out, bytes(self.out.data), bytes(self.err.data), self.out.cut,
                      self.err.cut, time.monotonic() - self.began)


class _Reader:
    """The select loop over a running command's pipes."""

    def __init__(self, job: Running) -> None:
        self.job = job
        self.sel = selectors.DefaultSelector()
        proc = job.proc
        for pipe, capture in ((proc.stdout, job.out), (proc.stderr, job.err)):
            if pipe is not None and not pipe.closed:
                self.sel.register(pipe, selectors.EVENT_READ, capture)
        self.left_to_write = memoryview(job.stdin or b"")
        if proc.stdin is not None and not proc.stdin.closed:
            if self.left_to_write:
                self.sel.register(proc.stdin, selectors.EVENT_WRITE, None)
            else:
                proc.stdin.close()

    def read(self) -> bool:
        """True when the deadline came first: while it ran, or (without
        `linger`) while its output was still open."""
        job, exited_at, after_exit = self.job, None, 0
        while self._reading():
            left = job.deadline - time.monotonic()
            if left <= 0:
                return job.linger is None or job.proc.poll() is None
            got = self._step(left if job.linger is None else min(left, READ_SLICE))
            if job.linger is None:
                continue
            if exited_at is not None:
                after_exit += got
            elif job.proc.poll() is not None:
                exited_at = time.monotonic()
            # Exited, but a child it left holds the pipe: stop reading soon.
            if exited_at is not None and (not got or after_exit > LINGER_BYTES
                                          or time.monotonic() - exited_at > job.linger):
                return False
        return False

    def read_left(self) -> None:
        """After a kill: what the pipes still hold, for a moment at most."""
        end = time.monotonic() + AFTER_KILL
        self._stop_writing()
        while self._reading() and (left := end - time.monotonic()) > 0:
            self._step(left)

    def close(self) -> None:
        self.sel.close()
        proc = self.job.proc
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None and not pipe.closed:
                pipe.close()

    def _reading(self) -> bool:
        return any(key.data is not None for key in self.sel.get_map().values())

    def _step(self, wait: float) -> int:
        """One select: write what the pipe takes, read what came; bytes read."""
        got = 0
        for key, _ in self.sel.select(wait):
            if key.data is None:
                self._write()
                continue
            chunk = os.read(key.fd, 65536)
            if not chunk:
                self.sel.unregister(key.fileobj)
                continue
            key.data.add(chunk)
            got += len(chunk)
        return got

    def _write(self) -> None:
        stdin = self.job.proc.stdin
        assert stdin is not None
        try:
            written = os.write(stdin.fileno(), self.left_to_write[:select.PIPE_BUF])
            self.left_to_write = self.left_to_write[written:]
        except BrokenPipeError:  # it stopped reading: what it read is what it gets
            self.left_to_write = memoryview(b"")
        if not self.left_to_write:
            self._stop_writing()

    def _stop_writing(self) -> None:
        stdin = self.job.proc.stdin
        if stdin is not None and not stdin.closed:
            if stdin in (key.fileobj for key in self.sel.get_map().values()):
                self.sel.unregister(stdin)
            stdin.close()


Stderr = Literal["pipe", "stdout", "null"]


def start(argv: Sequence[str], *, env: Mapping[str, str], timeout: float,
          cwd: str | None = None, stdin: bytes | None = None, out_limit: int,
          keep_tail: bool = False, err_limit: int = 8000, stderr: Stderr = "pipe",
          grace: float = 0.0, session: bool = True, linger: float | None = None,
          preexec: Callable[[], None] | None = None,
          kill: Callable[[subprocess.Popen[bytes]], object] | None = None) -> Running:
    """Start `argv`; raises what Popen raises when it cannot (OSError, or a
    SubprocessError from `preexec`). `kill` replaces the group kill at the
    deadline (the engine's also reaps what the command left)."""
    began = time.monotonic()
    proc = subprocess.Popen(list(argv), cwd=cwd, env=dict(env),
                            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=_STDERR[stderr],
                            start_new_session=session, close_fds=True, preexec_fn=preexec)
    return Running(proc, began, timeout, stdin, Capture(out_limit, keep_tail),
                   Capture(err_limit, True), linger,
                   kill or (lambda p: kill_group(p, grace, session)))


def run(argv: Sequence[str], *, env: Mapping[str, str], timeout: float,
        cwd: str | None = None, stdin: bytes | None = None, out_limit: int,
        keep_tail: bool = False, err_limit: int = 8000, stderr: Stderr = "pipe",
        grace: float = 0.0, session: bool = True, linger: float | None = None,
        preexec: Callable[[], None] | None = None) -> Result:
    """`argv` to its end or its deadline (see the module's docstring);
    whatever interrupts the wait (Ctrl-C) kills it first."""
    job = start(argv, env=env, timeout=timeout, cwd=cwd, stdin=stdin, out_limit=out_limit,
                keep_tail=keep_tail, err_limit=err_limit, stderr=stderr, grace=grace,
                session=session, linger=linger, preexec=preexec)
    try:
        return job.finish()
    except BaseException:
        job.kill(job.proc)
        raise


def detach(argv: Sequence[str], payload: bytes, folder: str) -> str | None:
    """Start `argv` in a session of its own that outlives this process, from
    `folder` (not the caller's directory: `python -m` imports from there),
    `payload` on its stdin, its output discarded; why it could not start,
    or None."""
    from loopctl.storage.paths import unnamed_file

    try:
        with unnamed_file(folder) as body:
            body.write(payload)
            body.seek(0)
            subprocess.Popen(list(argv), stdin=body, cwd=folder, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
    except OSError as exc:
        return str(exc.strerror or exc)
    return None
