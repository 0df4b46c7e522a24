"""`--fix-attempts` and `--notes` (DESIGN §16), for `start` and `update`."""

from __future__ import annotations

from typing import Any


def feedback_changes(fix_attempts: int | None, notes: bool | None) -> dict[str, Any]:
    """The options as loops.yaml keys; `--no-notes` removes the key (None).
    Read once, by parse_loop (their rows' kinds and rules)."""
    out: dict[str, Any] = {}
    if fix_attempts is not None:
        out["fix_attempts"] = fix_attempts
    if notes is not None:
        out["notes"] = True if notes else None
    return out
