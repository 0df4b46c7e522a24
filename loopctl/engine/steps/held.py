"""What holds one run's processes and caps its log: data the bounds step
fills in and the other steps carry (loopctl.engine.steps.bounds)."""

from __future__ import annotations

from loopctl.domain.plain import record
from loopctl.engine import reaper
from loopctl.engine.logcap import CappedCopy, LogTrim


@record
class RunBounds:
    held: reaper.Containment
    launched: bool = False  # the claim is ours: the run's folders are ours to make and remove
    trim: LogTrim | None = None  # scheduled runs: cuts the log back to the bound
    capped: CappedCopy | None = None  # `loopctl run`: the tee's copy into the log
    procs_fd: int | None = None  # the cgroup's procs file, joined in the child

    @property
    def truncated(self) -> bool:
        cap = self.trim or self.capped
        return bool(cap and cap.truncated)
