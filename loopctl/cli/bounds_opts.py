"""`--max-log`, `--max-memory` and the plain bounds of the table
(`--max-procs`, `--max-output-lines`, `--nice`; DESIGN §14), for `start` and
`update`."""

from __future__ import annotations

import sys
from typing import Any

from loopctl.cli.setting_opts import given
from loopctl.domain.loop_settings import PLAIN

BOUNDS = ("max_log", "max_memory", *(s.key for s in PLAIN))


def bounds_changes(max_log: str | None, max_memory: str | None,
                   **plain: str | None) -> dict[str, Any]:
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
    for key, value in plain.items():  # the rows' one rule each
        out.update(given(key, value))
    return out


def warn_bounds(raw: dict[str, Any]) -> None:
    """Say which bounds asked for this machine cannot enforce."""
    if raw.get("max_memory") is None and raw.get("max_procs") is None:
        return
    from loopctl.engine.containment.cgroup import unenforceable

    for line in unenforceable(raw.get("max_memory"), raw.get("max_procs")):
        print(f"warning: {line}", file=sys.stderr)
