"""`--max-log`, `--max-memory`, `--max-procs` (DESIGN §14), for `start` and `update`."""

from __future__ import annotations

import sys
from typing import Annotated, Any, Optional

import typer

from loopctl.cli.options import fail

MaxLog = Annotated[Optional[str], typer.Option(help="Agent output kept per run log (default 100MiB); the rest is discarded.")]  # noqa: E501
MaxMemory = Annotated[Optional[str], typer.Option(help="Memory of a run's processes, where cgroup v2 is delegated ('none' clears).")]  # noqa: E501
MaxProcs = Annotated[Optional[str], typer.Option(help="Processes a run may have at once, where cgroup v2 is delegated ('none' clears).")]  # noqa: E501


def bounds_changes(max_log: str | None, max_memory: str | None,
                   max_procs: str | None) -> dict[str, Any]:
    """The options as loops.yaml keys; 'none' clears (None), an absent
    option is left out."""
    from loopctl.domain.model import MIN_MAX_LOG, MIN_MAX_MEMORY
    from loopctl.domain.sizes import format_size, parse_size

    out: dict[str, Any] = {}
    if max_log is not None:
        out["max_log"] = format_size(parse_size(max_log, "--max-log", MIN_MAX_LOG))
    if max_memory is not None:
        out["max_memory"] = None if max_memory == "none" else \
            format_size(parse_size(max_memory, "--max-memory", MIN_MAX_MEMORY))
    if max_procs is not None:
        if max_procs != "none" and not (max_procs.isascii() and max_procs.isdigit()
                                        and 0 < int(max_procs) <= 10**9):
            fail(f"bad --max-procs {max_procs[:40]!r}: expected a whole number >= 1 or 'none'")
        out["max_procs"] = None if max_procs == "none" else int(max_procs)
    return out


def warn_bounds(raw: dict[str, Any]) -> None:
    """Say which bounds asked for this machine cannot enforce."""
    if raw.get("max_memory") is None and raw.get("max_procs") is None:
        return
    from loopctl.engine.reaper import unenforceable

    for line in unenforceable(raw.get("max_memory"), raw.get("max_procs")):
        print(f"warning: {line}", file=sys.stderr)
