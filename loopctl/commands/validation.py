"""`validate`: what a loops.yaml says, and what would fail every run of a
valid loop on this machine (its folder gone, a context rule unmet). It
never writes."""

from __future__ import annotations

from pathlib import Path

from loopctl.domain.model import LoopDef
from loopctl.domain.result import Result
from loopctl.fast.data_class import record
from loopctl.storage.store import Store


@record(frozen=True)
class Validation(Result):
    """`validate`: the loops that parse, each invalid one with its error, the
    concurrency caps in force, and warnings (a working directory gone)."""

    file: str
    valid: list[str]
    invalid: dict[str, str]
    max_concurrent: int
    max_concurrent_per_agent: dict[str, int]
    warnings: list[str]


def validate(store: Store, path: Path | None) -> Validation:
    from loopctl.domain.capacity import caps_of

    defs = store.read_defs(path)
    caps = caps_of(defs.top)
    return Validation(file=str(path or store.paths.loops_file), valid=sorted(defs.loops),
                      invalid=dict(sorted(defs.invalid.items())),
                      max_concurrent=caps.total, max_concurrent_per_agent=caps.per_agent,
                      warnings=[f"loop {name!r}: {said}" for name in sorted(defs.loops)
                                for said in _machine_problems(defs.loops[name])])


def _machine_problems(loop: LoopDef) -> list[str]:
    """What would fail every run of a valid loop on this machine: its folder
    gone, else the rows' context rules (a worktree loop outside git)."""
    gone = missing_cwd(loop)
    if gone:
        return [gone]
    from loopctl.integrations.context_rules import problems

    return problems(loop)


def missing_cwd(loop: LoopDef) -> str | None:
    """`working directory X does not exist` (or is not a folder): every run
    of the loop would fail so (a folder removed after `start`, a hand-written
    loops.yaml); `validate` and `doctor` say it before the first run does."""
    import os

    from loopctl.domain.reason import cwd_missing

    cwd = os.path.expanduser(loop.cwd)
    return None if os.path.isdir(cwd) else cwd_missing(cwd, os.path.lexists(cwd))
