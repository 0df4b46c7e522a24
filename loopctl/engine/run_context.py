"""What the steps of one run share (loopctl.engine.steps): which run, its
store, its log, its bounds; the claim, read once; and the values the steps
return, which the supervisor hands on to the steps after them."""

from __future__ import annotations

import os
from pathlib import Path

from loopctl.domain.checks import shell_join
from loopctl.domain.run_parts import GateRecord
from loopctl.domain.state import RunResult
from loopctl.fast.data_class import factory, record
from loopctl.storage.store import Store

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    import subprocess
    from typing import Any

    from loopctl.domain.feedback import Plan
    from loopctl.domain.model import LoopDef
    from loopctl.domain.state import LoopState
    from loopctl.engine.containment.confining import Confined
    from loopctl.engine.run_bounds import RunBounds
    from loopctl.integrations.worktree import Workspace


class RunLog:
    """The run's log, open for appending.

    loopctl's own lines from before the agent ran are held until it exits:
    the log starts with the agent's bytes at offset 0. A header there would
    leave every page-sized write of a flooding agent straddling two pages
    (measured: 8-10% more CPU per byte)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.held: list[str] = []

    def hold(self, line: str) -> None:
        self.held.append(line)

    def write(self, line: str) -> None:
        os.write(self.fd, (line + "\n").encode(errors="replace"))

    def flush_held(self) -> None:
        """After the agent: its last line ended, then the lines held back.
        A second call finds the log ending in a newline and nothing held."""
        lines, self.held = self.held, []
        try:
            size = os.fstat(self.fd).st_size
            if size and os.pread(self.fd, 1, size - 1) != b"\n":
                os.write(self.fd, b"\n")  # readers skip only whole `# loopctl:` lines
            for line in lines:
                self.write(line)
        except OSError:
            pass  # a full disk: the run record still says how it started

    def close(self) -> None:
        os.close(self.fd)


@record
class RunContext:
    store: Store
    name: str
    run_id: str
    foreground: bool
    log: RunLog
    # What the agent reported that failed a check (DESIGN §11): noted on the
    # record and on the loop, so `status` shows it.
    dropped: list[str]
    bounds: RunBounds
    # What a sandbox may read of the repository (DESIGN §14): from loopctl's
    # records; None until known. `found_repository`: looked up by this run
    # (a loop never looked up before), for launching to record.
    repository: tuple[str, ...] | None = None
    found_repository: tuple[str, ...] | None = None

    @property
    def log_path(self) -> Path:
        return self.store.paths.run_log(self.name, self.run_id)

    @property
    def decision_path(self) -> Path:
        return self.store.paths.decision_file(self.name, self.run_id)


@record
class Claim:
    """The claimed run, read once under the store lock when the supervisor
    starts: the loop as the claim defines it (an `update` after the claim
    applies to the next run), the claim itself, and the loop's state then."""
    loop: LoopDef
    run: dict[str, Any]
    state: LoopState

    @property
    def iteration(self) -> int:
        return int(self.run["iteration"])


@record
class Prepared:
    """What the worktree step made: the worktree (None: not a worktree run,
    or `note` says why it could not be made), and the PR it continues."""
    ws: Workspace | None = None
    note: str | None = None
    pr_fix: Plan | None = None


@record
class Gate:
    """What the loop's gate (`--if`) said; `outcome` None: it passed."""
    argv: list[str]
    exit_code: int | None
    outcome: str | None
    output: str  # the last GATE_TAIL bytes, as text
    duration_s: float
    note: str | None = None
    sandbox: str = "off"  # the gate's confinement: the record's when no agent ran

    @property
    def blocked(self) -> bool:
        return self.outcome is not None

    def record(self) -> GateRecord:
        """The run record's `gate`."""
        return GateRecord(self.exit_code, self.output)


@record
class Handed:
    """The notes handed to the agent: the run's copy, and the kept file's
    signature when copied (changed since: not overwritten)."""
    copy: Path
    kept_sig: Any


@record
class Launched:
    proc: subprocess.Popen[bytes] | None  # None: it could not start (note says why)
    argv: list[str]
    note: str | None
    sandbox: str = "off"  # what the record says: `landlock ABI 7`, `off`, or why not
    confined: Confined | None = None  # released once the agent's tree is gone


@record
class Guarded:
    """What putting the protected paths back did."""
    changed: list[str] = factory(list)
    flatten: bool = False
    failure: str | None = None

    @property
    def failed(self) -> bool:
        return self.failure is not None


@record
class Done:
    """What the steps returned that the record and the settling need."""
    gate: Gate | None = None
    pr_fix: Plan | None = None
    handed: Handed | None = None
    guarded: Guarded | None = None


def add_note(result: RunResult, note: str) -> None:
    result.note = f"{result.note}; {note}" if result.note else note


def add_dropped(ctx: RunContext, result: RunResult, notes: list[str]) -> None:
    ctx.dropped += notes
    for note in notes:
        add_note(result, note)


def one_line(argv: list[str], width: int = 160) -> str:
    """argv for the log header: one line (readers skip it), long args cut."""
    shown = [a if len(a) <= width else a[: width - 3] + "..." for a in argv]
    return shell_join(shown).replace("\r", "\\r").replace("\n", "\\n")
