"""`--fix-attempts` and `--notes` (DESIGN §16), for `start` and `update`."""

from __future__ import annotations

from typing import Any


def feedback_changes(fix_attempts: int | None, notes: bool | None) -> dict[str, Any]:
    """The options as loops.yaml keys; `--no-notes` removes the key (None).
    Checked by the one set of rules (feedback.parse_options) with the rest
    of the definition."""
    from loopctl.domain.feedback import MAX_FIX_ATTEMPTS

    out: dict[str, Any] = {}
    if fix_attempts is not None:
        if not 0 <= fix_attempts <= MAX_FIX_ATTEMPTS:
            from loopctl.cli.options import fail

            fail(f"bad --fix-attempts {fix_attempts}: expected a whole number from 0 to "
                 f"{MAX_FIX_ATTEMPTS}")
        out["fix_attempts"] = fix_attempts
    if notes is not None:
        out["notes"] = True if notes else None
    return out
