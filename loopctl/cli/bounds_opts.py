"""What `start` and `update` say about the bounds of the table (DESIGN §14)
this machine cannot enforce; the options themselves are the rows'."""

from __future__ import annotations

import sys
from typing import Any


def warn_bounds(raw: dict[str, Any]) -> None:
    """Say which bounds asked for this machine cannot enforce."""
    if raw.get("max_memory") is None and raw.get("max_procs") is None:
        return
    from loopctl.engine.containment.cgroup import unenforceable

    for line in unenforceable(raw.get("max_memory"), raw.get("max_procs")):
        print(f"warning: {line}", file=sys.stderr)
