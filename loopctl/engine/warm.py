"""Warm supervisors: a daemon's runs, each supervised by a process that
supervised runs before.

A supervisor forked per run pays for the fork twice over: the page tables
copied, and a copy-on-write fault for every page it writes, because every
page it touches (Python writes reference counts on each object it reads,
and the counters of each function's bytecode) is shared with the daemon;
the daemon pays the same for its own writes after each fork. Measured, the
faults were most of a daemon-fired run's CPU (bench/README.md). A warm
supervisor is forked once and supervises one run after another: from its
second run on, the pages it writes are its own.

Each run is still supervised by one process, recorded as the run's
supervisor (pid and start time) in state.json under the store lock before
the run starts, in a cgroup leaf of its own, and a session apart from the
daemon. Between runs it waits on its job socket in the daemon's cgroup. It
ends when the daemon closes that socket (the daemon stopped, or the worker
is retired after RUNS_PER_WORKER runs or IDLE_LIMIT seconds idle), and on
anything unexpected in a run: then the run is unsettled and the daemon,
reaping it, records it lost, as for a supervisor killed mid-run.
"""

from __future__ import annotations

import os
import signal
import socket
import sys

from loopctl.engine.containment.cgroup import own_cgroup
from loopctl.engine.run_signals import STOP_SIGNALS
from loopctl.storage.store import Store

RUNS_PER_WORKER = 200  # then a fresh one: nothing a run left grows for ever
IDLE_LIMIT = 300.0  # seconds an idle worker is kept
MAX_IDLE = 4


class Worker:
    __slots__ = ("pid", "jobs", "runs", "idle_since")

    def __init__(self, pid: int, jobs: socket.socket) -> None:
        self.pid = pid
        self.jobs = jobs  # our end of its job socket
        self.runs = 0
        self.idle_since = 0.0


class Pool:
    """The daemon's warm supervisors. `launch` is firing.spawn_supervisor's
    stand-in: it returns the pid that supervises the run."""

    def __init__(self) -> None:
        self.idle: list[Worker] = []
        self.busy: dict[int, Worker] = {}
        # The daemon's own descriptors (its wake-up pipe, its file watch),
        # closed in each worker.
        self.private: list[int] = []
        self.done_r, self.done_w = os.pipe()
        os.set_blocking(self.done_r, False)
        for fd in (self.done_r, self.done_w):
            os.set_inheritable(fd, False)

    def launch(self, store: Store, loop: str, run_id: str, command_loop: bool = True) -> int:
        """The run's log is opened here, as for a forked supervisor: a run
        folder that cannot hold it is this loop's error (LoopctlError), and
        the worker gets the descriptor checked here with the job."""
        from loopctl.engine.supervisor import preload
        from loopctl.storage.runs import open_log

        preload(command_loop)
        store.run_dir(loop)
        log = open_log(store.paths.run_log(loop, run_id))
        try:
            while self.idle:
                worker = self.idle.pop()
                if self._send(worker, loop, run_id, log):
                    return self._started(worker)
            worker = self._fork(store, log)
            if not self._send(worker, loop, run_id, log):
                from loopctl.domain.errors import LoopctlError

                raise LoopctlError("cannot start a supervisor: its job socket is closed")
            return self._started(worker)
        finally:
            os.close(log)

    def _started(self, worker: Worker) -> int:
        worker.runs += 1
        self.busy[worker.pid] = worker
        return worker.pid

    @staticmethod
    def _send(worker: Worker, loop: str, run_id: str, log: int) -> bool:
        try:
            socket.send_fds(worker.jobs, [f"{loop}\t{run_id}".encode()], [log])
            return True
        except OSError:  # it died while idle: the daemon reaps it
            worker.jobs.close()
            return False

    def _fork(self, store: Store, log: int) -> Worker:
        """`log`, the log of the run it is forked for, is open here and so
        in the child: closed there, as the daemon's own descriptors are. The
        worker gets that run's log with the job, like any other, and holds
        no run's log once the run is over (a log deleted or pruned must
        free its space; a home must remount read-only)."""
        # Datagrams in order: one job (and its log) per message, and the
        # daemon's end closed reads as an empty one.
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as exc:  # out of processes or memory: this loop's error
            ours.close()
            theirs.close()
            from loopctl.domain.errors import LoopctlError

            raise LoopctlError(f"cannot start a supervisor: {exc.strerror}") from None
        if pid:
            theirs.close()
            return Worker(pid, ours)
        code = 1
        try:
            from loopctl.engine.firing import forget_daemon_signals

            forget_daemon_signals()  # before its wake-up pipe is closed below
            ours.close()
            # Not the other workers' sockets: each must see its own end close.
            for other in [*self.idle, *self.busy.values()]:
                other.jobs.close()
            for fd in (self.done_r, log, *self.private):
                _close(fd)
            code = serve(store, theirs, self.done_w)
        except BaseException as exc:  # the child must never return
            _say(f"loopctl supervisor: {type(exc).__name__}: {exc}")
        finally:
            os._exit(code)

    def settled(self, now: float) -> None:
        """Workers that said their run is over go back to the idle list;
        the ones idle too long, or too many, are retired."""
        try:
            data = os.read(self.done_r, 4096)
        except BlockingIOError:
            data = b""
        for word in data.split():
            worker = self.busy.pop(int(word), None) if word.isdigit() else None
            if worker is None:
                continue
            if worker.runs >= RUNS_PER_WORKER or len(self.idle) >= MAX_IDLE:
                worker.jobs.close()
                continue
            worker.idle_since = now
            self.idle.append(worker)
        for worker in [w for w in self.idle if now - w.idle_since > IDLE_LIMIT]:
            self.idle.remove(worker)
            worker.jobs.close()

    def forget(self, pid: int) -> None:
        """A worker the daemon reaped (it exited or was killed)."""
        worker = self.busy.pop(pid, None)
        for w in list(self.idle):
            if w.pid == pid:
                self.idle.remove(w)
                worker = w
        if worker is not None:
            worker.jobs.close()

    def close(self) -> None:
        """The daemon stops: idle workers end now, busy ones after their run."""
        for worker in [*self.idle, *self.busy.values()]:
            worker.jobs.close()
        self.idle.clear()
        self.busy.clear()


def serve(store: Store, jobs: socket.socket, done: int) -> int:
    """In the worker: supervise each run the daemon sends, until it closes
    the socket. Returns the exit code; raises (and so ends) on anything odd."""
    from loopctl.collector import long_lived
    from loopctl.engine.supervisor import Supervisor

    long_lived()  # the daemon's objects frozen: a collection writes none of its pages
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    home = own_cgroup()
    for _ in range(RUNS_PER_WORKER):
        between_runs()
        job = _next_job(jobs)
        if job is None:
            return 0
        loop, run_id, log = job
        os.dup2(log, 1)  # the run's stdout and stderr are its log
        os.dup2(log, 2)
        os.close(log)
        Supervisor(Store(store.paths), loop, run_id, foreground=False).run()
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(null, 1)
        os.dup2(null, 2)
        if not clean_after_run(home):
            return 0  # retired: the next run gets a fresh worker
        try:
            os.write(done, f"{os.getpid()}\n".encode())
        except OSError:  # the daemon is gone: nothing more will come
            return 0
    return 0


def between_runs() -> None:
    """While it waits, a stop meant for the run it just finished (sent as
    that run ended) must not end the worker, or the next run would start
    and be lost: the stop signals are ignored until the next run's
    supervisor takes them (run_signals.interruptible)."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def clean_after_run(home: str | None) -> bool:
    """True when the run left the worker as it was: no child (stray
    zombies reaped), no thread, back in the cgroup it started in. Else it
    retires rather than carry anything into another run."""
    import threading

    from loopctl.engine import procs

    procs.reap()
    return not procs.has_children() and threading.active_count() == 1 \
        and own_cgroup() == home


def _next_job(jobs: socket.socket) -> tuple[str, str, int] | None:
    """The next run and its log's descriptor; None when the daemon closed
    its end (it stopped, or retired this worker)."""
    from loopctl.domain.names import is_loop_name, is_run_id

    message, fds, _, _ = socket.recv_fds(jobs, 512, 1)
    if not message:
        for fd in fds:
            os.close(fd)
        return None
    loop, _, run_id = message.decode().partition("\t")
    if len(fds) != 1 or not is_loop_name(loop) or not is_run_id(run_id):
        raise ValueError(f"not a job: {message[:80]!r}")
    return loop, run_id, fds[0]


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _say(line: str) -> None:
    try:
        os.write(2, (line + "\n").encode())
    except OSError:
        pass


def idle_deadline(pool: Pool) -> float | None:
    """When the next idle worker is due to be retired."""
    return min((w.idle_since + IDLE_LIMIT for w in pool.idle), default=None) \
        if pool.idle else None

