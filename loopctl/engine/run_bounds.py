"""The run's bounds (DESIGN §14): its processes held and reaped, its log capped.

Held when the claim is read, applied in the child before exec, finished
after the wait; the steps only ask this module."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from loopctl.engine import reaper
from loopctl.engine.containment import cgroup
from loopctl.engine.logcap import CappedCopy, LogTrim, note_line
from loopctl.fast.data_class import record

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from loopctl.domain.model import LoopDef
    from loopctl.engine.run_context import RunContext


@record
class RunBounds:
    held: cgroup.Containment
    launched: bool = False  # the claim is ours: the run's folders are ours to make and remove
    trim: LogTrim | None = None  # scheduled runs: cuts the log back to the bound
    capped: CappedCopy | None = None  # `loopctl run`: the tee's copy into the log
    procs_fd: int | None = None  # the cgroup's procs file, joined in the child
    nice: int | None = None  # the loop's niceness, taken in the child

    @property
    def truncated(self) -> bool:
        cap = self.trim or self.capped
        return bool(cap and cap.truncated)


def unheld(state_dir: Path, name: str, run_id: str) -> RunBounds:
    """Before the claim is checked: only the marker the run's processes carry."""
    return RunBounds(cgroup.Containment(reaper.run_mark(state_dir, name, run_id)))


def hold(ctx: RunContext, loop: LoopDef) -> None:
    """The run is ours (under the store lock): a cgroup for its processes,
    its limits, its decision folder."""
    b = ctx.bounds
    b.launched = True
    b.held = cgroup.contain(reaper.run_mark(ctx.store.paths.state_dir, ctx.name, ctx.run_id))
    b.nice = loop.nice
    for note in cgroup.apply_limits(b.held, loop.max_memory, loop.max_procs):
        ctx.log.hold(f"# loopctl: {note}")
    from loopctl.storage.paths import ensure_dir

    ensure_dir(ctx.decision_path.parent)


def agent_output(ctx: RunContext, loop: LoopDef) -> int:
    """Where the agent's stdout and stderr go: straight into the log (no
    byte through Python; a watcher cuts it back to the bound while it
    waits), or in the foreground a pipe the tee copies through the cap."""
    import subprocess

    if ctx.foreground:
        ctx.bounds.capped = CappedCopy(ctx.log.fd, loop.max_log, loop.max_output_lines)
        return subprocess.PIPE
    return ctx.log.fd


def watch_log(ctx: RunContext, loop: LoopDef) -> None:
    """While the agent runs: keep the log within --max-log."""
    if not ctx.foreground:
        ctx.bounds.trim = LogTrim(ctx.log.fd, loop.max_log, loop.max_output_lines)
        ctx.bounds.trim.start()


def child_setup(ctx: RunContext) -> Callable[[], None]:
    """Run in the child between fork and exec: die with the supervisor, join
    the run's cgroup."""
    ctx.bounds.procs_fd = cgroup.open_procs(ctx.bounds.held)
    return reaper.child_setup(os.getpid(), ctx.bounds.procs_fd, ctx.bounds.nice)


def spawned(ctx: RunContext) -> None:
    """After Popen, started or not: close our end of the cgroup's file."""
    b = ctx.bounds
    if b.procs_fd is not None:
        os.close(b.procs_fd)
        b.procs_fd = None


def reap(ctx: RunContext) -> set[int]:
    """Kill until nothing the run started is left (forkers, TERM-ignorers,
    setsid); the pids killed."""
    return reaper.finish(ctx.bounds.held)


def drained(ctx: RunContext) -> None:
    if ctx.bounds.trim is not None:
        ctx.bounds.trim.stop()


def tee_write(ctx: RunContext, chunk: bytes) -> None:
    capped = ctx.bounds.capped
    assert capped is not None
    try:
        capped.write(chunk)
    except OSError:
        capped.left = 0  # a full disk stops the log, not the run


def end(ctx: RunContext) -> None:
    """The log's last line says it was cut; the decision folder goes."""
    b = ctx.bounds
    if b.trim is not None and b.trim.error:
        ctx.log.hold(f"# loopctl: log bound not kept: {b.trim.error}")
    cap = b.trim or b.capped
    if cap is not None and cap.truncated:
        ctx.log.hold(note_line(cap.limit, cap.count.lines if cap.count.cut is not None
                               else None))
    ctx.log.flush_held()
    if b.launched:
        from loopctl.storage.run_files import remove_decision_dir

        remove_decision_dir(ctx.decision_path.parent)
    reaper.release(b.held)
