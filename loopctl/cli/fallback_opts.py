"""`--fallback-agent PRESET` for `start` and `update` (DESIGN §18)."""

from __future__ import annotations

from typing import Any

from loopctl.cli.options import fail
from loopctl.domain.model import PRESETS

AGENTS = [p for p in PRESETS if p != "shell"]


def fallback_changes(fallback_agent: str | None, clearing: bool) -> dict[str, Any]:
    """`fallback_agent` for loops.yaml: absent when not given; None (the
    key removed) for `none` on `update`."""
    value = fallback_agent
    if value is None:
        return {}
    if value == "none":
        return {"fallback_agent": None} if clearing else {}
    if value not in AGENTS:
        fail(f"bad --fallback-agent {value!r}: expected one of {', '.join(AGENTS)}, or none")
    return {"fallback_agent": value}
