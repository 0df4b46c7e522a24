"""What every step of one run shares: which run, its store, its log."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loopctl.domain.plain import record
from loopctl.domain.state import RunResult
from loopctl.storage.store import Store

if TYPE_CHECKING:
    from loopctl.engine.steps.held import RunBounds


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
    sandbox: str = "off"  # what the record says: `landlock ABI 7`, `off`, or why not
    confinement: Any = None  # engine.sandbox.Confinement while the agent runs
    prompt_path: str | None = None  # the prompt file the agent may read
    # What a sandbox may read of the repository (DESIGN §14): from loopctl's
    # records; None until known. `found_repository`: looked up by this run
    # (a loop never looked up before), for launching to record.
    repository: tuple[str, ...] | None = None
    found_repository: tuple[str, ...] | None = None
    gate: Any = None  # steps.gate.Gate once the loop's gate ran
    pr_fix: Any = None  # domain.feedback.Plan once the loop's PR was looked at
    notes: Any = None  # steps.notes.Handed while the agent has the notes
    protected: Any = None  # steps.protect.Guarded once protected paths were put back

    @property
    def log_path(self) -> Path:
        return self.store.paths.run_log(self.name, self.run_id)

    @property
    def decision_path(self) -> Path:
        return self.store.paths.decision_file(self.name, self.run_id)


def add_note(result: RunResult, note: str) -> None:
    result.note = f"{result.note}; {note}" if result.note else note


def add_dropped(ctx: RunContext, result: RunResult, notes: list[str]) -> None:
    ctx.dropped += notes
    for note in notes:
        add_note(result, note)


def one_line(argv: list[str], width: int = 160) -> str:
    """argv for the log header: one line (readers skip it), long args cut."""
    shown = [a if len(a) <= width else a[: width - 3] + "..." for a in argv]
    return shlex.join(shown).replace("\r", "\\r").replace("\n", "\\n")
