"""`--check`, `--check-timeout`, `--until-check`, `--check-metric` (DESIGN §16),
for `start` and `update`."""

from __future__ import annotations

from typing import Any


def check_changes(check: str | None, check_timeout: str | None, until_check: bool | None,
                  check_metric: str | None) -> dict[str, Any]:
    """The options as loops.yaml keys; an absent option is left out, None
    clears. `--check none` clears the check's three options too (they mean
    nothing without it). Their values are read once, by parse_loop (their
    rows' kinds and domain/verify), named by the options."""
    from loopctl.domain.setting_rules import goes_with

    if check == "none":
        if any(v not in (None, False) for v in (check_timeout, until_check, check_metric)):
            from loopctl.cli.options import fail

            fail("--check none clears the check and its options; give it alone")
        return dict.fromkeys(goes_with("check"))
    out: dict[str, Any] = {}
    if check is not None:
        out["check"] = check
    if check_timeout is not None:
        out["check_timeout"] = check_timeout
    if until_check is not None:
        out["until_check"] = True if until_check else None
    if check_metric is not None:
        out["check_metric"] = None if check_metric == "none" else check_metric
    return out
