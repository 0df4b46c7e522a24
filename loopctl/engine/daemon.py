"""The long-running driver: hold the lease, fire loops as they come due.

It sleeps until the earliest due time, the next heartbeat, or one second,
whichever is first, and wakes at once when `loops.yaml` or `state.json` is
replaced (inotify, engine/filewatch.py): `loopctl trigger` writes state.json
(DESIGN §17), so a triggered loop fires within a pass's time, and so does a
new or resumed loop. The one-second wake is a pair of stat() calls that
notice the same edits where inotify is missing. Its runs are supervised by
warm supervisors (engine/warm.py), each forked once for many runs; one that
settled its run says so on a pipe, which ends the sleep at once: a loop
queued behind `max_concurrent` takes the freed slot without waiting for
the next stat() (DESIGN §18). A wake where only state.json changed (a run
started or settled) takes no pass when the summary proves nothing is due.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from typing import Any

from loopctl import clock
from loopctl.domain.errors import LoopctlError
from loopctl.engine.filewatch import FileWatch, open_watch
from loopctl.engine.firing import driver_pass, reap_children
from loopctl.engine.store_wake import StoreWake
from loopctl.storage.lease import LeaseFile
from loopctl.storage.paths import file_signature, quiet_until, read_summary
from loopctl.storage.store import Store

WATCH_INTERVAL = 1.0
# While runs are in flight, look at them this often: a supervisor killed with
# SIGKILL changes no file, and its run must still be recorded lost.
IN_FLIGHT_CHECK = 5.0
# A pass that failed (state.json cannot be written: a full disk, a read-only
# remount) is tried again after 1 s, then 2, 4, ... up to this: space freed
# is noticed without any edit, and a home that stays full costs little.
RETRY_LIMIT = 30.0


def retry_after(failures: int, limit: float = RETRY_LIMIT) -> float:
    """Seconds before the next try after `failures` failed passes in a row."""
    return min(limit, 2.0 ** max(0, min(failures, 16) - 1))


class Daemon:
    def __init__(self, store: Store, quiet: bool = False) -> None:
        self.store = store
        self.quiet = quiet
        self.lease = LeaseFile(store.paths, "daemon")
        self.stopping = False
        self.children: list[int] = []
        self.last_error: str | None = None
        self.failures = 0  # failed passes in a row
        self.me: dict[str, Any] = {}
        self.noted = ""  # what the daemon's note says now (storage/daemon_note.py)
        self.busy = False
        self.queued: set[str] = set()  # loops waiting for a slot, logged once
        self.watch: FileWatch | None = None
        from loopctl.engine.warm import Pool

        self.pool = Pool()
        # A home with a team store also wakes on a NOTIFY from any machine.
        self.wake = StoreWake(store, self.log, self.pool.private)
        from loopctl.engine.daemon_log import DaemonLog

        # Quiet, it prints none of it: no record or event read for a line.
        self.daemon_log: DaemonLog | None = None if quiet else DaemonLog(store)

    def log(self, message: str) -> None:
        if not self.quiet:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime())
            print(f"{stamp} loopctl daemon: {message}", file=sys.stderr, flush=True)

    def _stop(self, signum: int, _frame: Any) -> None:
        self.stopping = True

    def signatures(self) -> tuple[Any, Any]:
        paths = self.store.paths
        return file_signature(paths.loops_file), file_signature(paths.state_file)

    def _wake_on_signals(self) -> None:
        """Any signal handled here (SIGTERM, SIGINT, SIGCHLD) writes a byte to
        a pipe that `_sleep` waits on: a stop or a settled run wakes it."""
        self.wake_r, wake_w = os.pipe()
        for fd in (self.wake_r, wake_w):
            os.set_blocking(fd, False)
            os.set_inheritable(fd, False)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        self.pool.private += [self.wake_r, wake_w]
        signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
        from loopctl.settings import knob

        if not knob("LOOPCTL_FILE_WATCH"):
            return
        from loopctl.storage.paths import ensure_dir

        # Made here if missing: on a fresh home (a daemon started before any
        # `start`) the state folder does not exist yet, a watch on it fails,
        # and the daemon would fall back to the one-second stat for good.
        paths = self.store.paths
        folders = [str(ensure_dir(paths.config_dir)), str(ensure_dir(paths.state_dir))]
        self.watch = open_watch(folders, [paths.loops_file.name, paths.state_file.name])
        if self.watch is not None:
            self.pool.private.append(self.watch.fileno())

    def run(self) -> int:
        from loopctl.collector import long_lived

        long_lived()  # off for start-up (loopctl.entry); this process lives for days
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        self._wake_on_signals()
        heartbeat_every = self.lease.ttl / 3
        next_heartbeat = 0.0
        seen: tuple[Any, Any] | None = None
        wake_at: float | None = None
        last_pass = 0.0
        self.log(f"started (pid {os.getpid()}, lease ttl {self.lease.ttl:g}s)")
        try:
            while not self.stopping:
                now = clock.now()
                if now >= next_heartbeat:
                    if not self._heartbeat(now):
                        self.wake.take()  # without the lease a wake is moot: dropped
                        self._sleep(min(heartbeat_every, WATCH_INTERVAL * 5))
                        continue
                    next_heartbeat = now + heartbeat_every
                killed = self._reap()
                current = self.signatures()
                checking = killed or self.busy and now - last_pass >= IN_FLIGHT_CHECK
                due = self.wake.take() or wake_at is not None and now >= wake_at
                state_only = seen is not None and current != seen and current[0] == seen[0]
                quiet = self._quiet(now, current) if state_only and not (checking or due) \
                    else None
                if quiet is not None:
                    wake_at, self.busy = quiet
                    seen = current
                    self._report_ends()
                elif current != seen or checking or due:
                    wake_at, seen = self._pass(now)
                    if not self.lease.held:  # lost under the lock: renew, then look again
                        next_heartbeat, seen = 0.0, None
                        continue
                    last_pass = now
                    if wake_at is not None and wake_at <= now:
                        # Still due after a pass: never spin; look again in a second.
                        wake_at = now + WATCH_INTERVAL
                deadline = min(t for t in (wake_at, next_heartbeat, now + WATCH_INTERVAL)
                               if t is not None)
                self._sleep(deadline - clock.now())
        finally:
            self.pool.close()
            self.wake.close()
            if self.watch is not None:
                self.watch.close()
            held = self.lease.held
            self.lease.release()
            self.log("stopped; " + ("lease released " if held else "")
                     + "(runs in flight finish on their own)")
        return 0

    def _heartbeat(self, now: float) -> bool:
        was_held = self.lease.held
        try:
            holder = self.lease.acquire(now)
        except LoopctlError as exc:
            self.log(f"lease: {exc.message}; retrying")
            self._note(f"lease: {exc.message}", now)
            return False
        if holder is not None:
            if was_held or self.last_error != "lease":
                self.log(f"lease held by {holder.role} pid {holder.pid} on {holder.host}; "
                         "waiting for it to be released or to expire")
            self.last_error = "lease"
            return False
        if not was_held:
            self.log("lease acquired")
            self.last_error = None
            self._prepare_note()
        elif self.noted.startswith("lease: "):
            self._note("", now)  # writing again; a failed pass says so itself
        return True

    def _pass(self, now: float) -> tuple[float | None, tuple[Any, Any]]:
        """The next wake time, and the files' signatures the pass saw: not
        taken after it, or a run that settled meanwhile would go unnoticed."""
        # Taken before the pass: a file fixed while it failed must look new.
        before = self.signatures()
        try:
            report = driver_pass(self.store, now, lease=self.lease, spawn=self.pool.launch)
        except LoopctlError as exc:
            return self._failed(now, exc.message), before
        self.failures = 0
        self._note("", now)  # before the log line, as _failed does
        if self.last_error not in (None, "lease"):
            self.log("firing resumes")
            self.last_error = None
        for fired in report.fired:
            missed = f", {fired['missed']} missed" if fired["missed"] else ""
            self.log(f"fired {fired['loop']} run {fired['run_id']}{missed}")
            if self.daemon_log is not None:
                self.daemon_log.fired(fired["loop"], fired["run_id"])
        queued = {q["loop"] for q in report.queued}
        for loop in sorted(queued - self.queued):
            self.log(f"queued {loop}: the concurrency cap is reached; it starts when a slot "
                     "frees")
        self.queued = queued
        for run_id in report.lost:
            self.log(f"recorded run {run_id} as lost (its supervisor died)")
        self._report_ends()
        # A warm supervisor is launched again for each run: listed once.
        self.children = list(dict.fromkeys([*self.children, *report.children]))
        self.busy = report.busy
        return report.wake_at, report.signatures or before

    def _failed(self, now: float, message: str) -> float:
        """A pass that failed: said once (in the log and the daemon's note,
        for `doctor` and `ls`), and tried again after a backoff, without
        waiting for an edit: space freed changes no file loopctl watches."""
        self.failures += 1
        # The note first: whoever reads the log line can then find it.
        self._note(message, now)
        if message != self.last_error:
            self.log(f"not firing: {message}")
            self.last_error = message
        return now + retry_after(self.failures, min(RETRY_LIMIT, self.lease.ttl / 3))

    def _prepare_note(self) -> None:
        from loopctl.storage import daemon_note
        from loopctl.storage.proc_identity import ref

        self.me = self.me or ref()
        daemon_note.prepare(self.store.paths, self.me)
        self.noted = ""

    def _note(self, error: str, now: float) -> None:
        """Said once per change, and only by the daemon holding the lease
        (a note is prepared when it takes it)."""
        from loopctl.storage import daemon_note

        if error != self.noted and self.me:
            self.noted = error if daemon_note.say(self.store.paths, self.me, error, now) \
                else self.noted

    def _quiet(self, now: float, current: tuple[Any, Any]) -> tuple[float | None, bool] | None:
        """Only state.json changed (a run started or settled, a verb): when
        its summary proves nothing is due before a time, that time and
        whether a run is in flight, without a pass (two of every fire's
        three passes). Checked against the summary the change wrote, for
        the files as `current` (their signatures) found them: `loops.yaml`
        as reconciled, the clock, the due times."""
        summary = read_summary(self.store.paths.summary_file)
        if summary is None or summary.get("state_sig") != current[1]:
            return None  # none, or of another state.json
        return quiet_until(summary, current[0], now)

    def _report_ends(self) -> None:
        for line in self.daemon_log.lines() if self.daemon_log is not None else ():
            self.log(line)

    def _reap(self) -> bool:
        """True when a supervisor was killed: its run is lost, and its slot
        under `max_concurrent` is free once a pass records that."""
        self.pool.settled(clock.now())  # and retires the workers idle too long
        running, killed = reap_children(self.children)
        for pid in set(self.children) - set(running):
            self.pool.forget(pid)
        self.children = running
        return killed

    def _sleep(self, seconds: float) -> None:
        """Until `seconds` pass or a signal arrives (see `_wake_on_signals`)."""
        end = time.monotonic() + min(seconds, WATCH_INTERVAL * 30)
        waits: list[Any] = [self.wake_r, self.pool.done_r, *self.wake.waits()]
        if self.watch is not None:
            waits.append(self.watch)
        while not self.stopping and (left := end - time.monotonic()) > 0:
            # The store's socket stays in `waits`: a lost link returns first.
            ready, _, _ = select.select(waits, [], [], min(left, WATCH_INTERVAL,
                                                            self.wake.hold()))
            if self.wake.readable(ready):
                return  # a NOTIFY from the store (or its link lost): look now
            if self.watch in ready and self.watch is not None and self.watch.drain():
                return  # loops.yaml or state.json replaced: look now
            if self.pool.done_r in ready:
                self.pool.settled(clock.now())  # a run is over: its slot is free
                return
            if self.wake_r in ready:
                try:
                    while os.read(self.wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
                return
