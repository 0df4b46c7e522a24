"""`tick --wait` (DESIGN §5, §18): wait for every run the tick started and,
when `max_concurrent` queued some of the loops that were due, start each as
a slot frees (a pass of its own, under the lease) and wait for it too. A CI
job is thus never green on a partial pass: what could not be started here
(the slots are held by runs this tick did not start, or another driver took
the lease) is named on the result, and the exit code says so (75)."""

from __future__ import annotations

import os
import select

from loopctl import clock
from loopctl.engine.firing import TickReport, tick, wait_for_children
from loopctl.storage.store import Store

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from loopctl.domain.run_record import RunRecord
    from loopctl.engine.firing import PassReport

    Told = Callable[[dict[str, Any]], None]
    Ended = Callable[[RunRecord], None]


class Children:
    """The supervisors this tick started, each woken by a pidfd as it exits,
    so a long first run does not hide that a later one ended; more can join
    while the others are waited for."""

    def __init__(self) -> None:
        self.fds: dict[int, int] = {}
        self.plain: list[int] = []  # no pidfd here: waited for in turn

    def add(self, pid: int) -> None:
        try:
            self.fds[os.pidfd_open(pid)] = pid
        except OSError:
            self.plain.append(pid)

    def next_ended(self) -> int | None:
        """The next child to exit, reaped; None when none is left."""
        if self.plain:
            pid = self.plain.pop(0)
        elif self.fds:
            ready, _, _ = select.select(list(self.fds), [], [])
            pid = self.fds.pop(ready[0])
            os.close(ready[0])
        else:
            return None
        wait_for_children([pid])
        return pid

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()


def wait_runs(store: Store, result: TickReport, ended: Ended | None = None,
              started: Told | None = None) -> None:
    """Wait for the runs a pass fired and for the due loops it queued.
    `ended(record)` is told of each run as it ends (its record goes on
    `result.records`), `started(fire)` of each queued loop a later pass
    started. Loops still queued at the end go on `result.still_queued`."""
    report = result.pass_report
    if report is None:
        return
    fired = dict(zip(report.children, report.fired, strict=True))
    chase = {q["loop"] for q in report.queued}  # due when the tick began
    children = Children()
    try:
        for child in report.children:
            children.add(child)
        while (pid := children.next_ended()) is not None:
            result.records.append(_record_of(store, fired.pop(pid)))
            if ended is not None:
                ended(result.records[-1])
            if chase and result.left_to is None:
                chase = _start_queued(store, result, chase, children, fired, started)
    finally:
        children.close()
    result.still_queued = sorted(chase)


def _record_of(store: Store, fire: dict[str, Any]) -> RunRecord:
    from loopctl.domain.run_record import RunRecord
    from loopctl.storage.runs import read_record

    return read_record(store.paths, fire["loop"], fire["run_id"]) \
        or RunRecord(run_id=fire["run_id"], loop=fire["loop"], outcome="lost",
                     keys=["run_id", "loop", "outcome"])  # its file gone: what is known


def _start_queued(store: Store, result: TickReport, chase: set[str], children: Children,
                  fired: dict[int, dict[str, Any]], started: Told | None) -> set[str]:
    """A slot freed: one more pass, under the lease, starts what it can. A
    chased loop that is neither started nor queued any more (paused,
    removed) is no longer waited for."""
    again = tick(store, clock.now())
    more = again.pass_report
    if more is None or more.lease_lost:
        result.left_to = again.deferred_to or {"role": "driver", "pid": None,
                                               "busy": "another driver took the lease"}
        return chase
    _join(result.pass_report, more, children, fired, started)
    return chase & {q["loop"] for q in more.queued}


def _join(first: PassReport | None, more: PassReport, children: Children,
          fired: dict[int, dict[str, Any]], started: Told | None) -> None:
    for pid, fire in zip(more.children, more.fired, strict=True):
        children.add(pid)
        fired[pid] = fire
        if first is not None:
            first.fired.append(fire)
        if started is not None:
            started(fire)
