"""`--check`, `--check-timeout`, `--until-check`, `--check-metric` (DESIGN §16),
for `start` and `update`."""

from __future__ import annotations

from typing import Any


def check_changes(check: str | None, check_timeout: str | None, until_check: bool | None,
                  check_metric: str | None) -> dict[str, Any]:
    """The options as loops.yaml keys; an absent option is left out, None
    clears. `--check none` clears the check's three options too (they mean
    nothing without it). Checked by the one set of rules (parse_verify)."""
    from loopctl.domain.verify import KEYS, check_regex, parse_verify

    if check == "none":
        if any(v not in (None, False) for v in (check_timeout, until_check, check_metric)):
            from loopctl.cli.options import fail

            fail("--check none clears the check and its options; give it alone")
        return dict.fromkeys(KEYS)
    out: dict[str, Any] = {}
    if check is not None:
        out["check"] = check
    if check_timeout is not None:
        out["check_timeout"] = check_timeout
    if until_check is not None:
        out["until_check"] = True if until_check else None
    if check_metric is not None:
        out["check_metric"] = None if check_metric == "none" else \
            check_regex(check_metric, "--check-metric")
    # The values alone (the check they may need is in the loop, for update).
    from loopctl.domain.errors import UsageError

    try:
        parse_verify({k: v for k, v in out.items() if k != "until_check" and v is not None}
                     | {"check": out.get("check") or "probe"}, "--check")
    except UsageError as exc:
        message = exc.message.replace("--check: bad 'check'", "bad --check")
        raise UsageError(message.replace("'check_timeout'", "--check-timeout")) from None
    return out
