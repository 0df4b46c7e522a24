"""`trigger`: fire a loop as soon as a driver can (DESIGN §17)."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from loopctl.cli.options import JsonOpt, NameArg, emit, fail, store


def trigger(
    name: NameArg,
    payload: Annotated[Optional[str], typer.Option(metavar="FILE|-", help="Up to 64 KiB of UTF-8 text the run's agent reads at $LOOPCTL_TRIGGER_FILE ('-': stdin).")] = None,  # noqa: E501
    as_json: JsonOpt = False,
) -> None:
    """Fire a loop as soon as a driver can, and say which driver (or that none runs)."""
    from loopctl.commands.trigger import trigger as accept

    text = read_payload(payload) if payload is not None else None
    result = accept(store(), name, text)
    if as_json:
        emit(result.to_json())
        return
    count = result.triggers
    coalesced = f" ({count} triggers coalesce into this fire)" if count > 1 else ""
    after = f"when run {result.run_in_flight} ends, " if result.run_in_flight else ""
    print(f"triggered {name}{coalesced}: " + WHO_FIRES[result.driver].format(
        after=after, pid=result.driver_pid))


# Accepted all the same (exit 0): the trigger is kept, and the next driver
# pass fires it, whenever one comes; but only a running driver makes one come.
WHO_FIRES = {
    "daemon": "{after}the daemon (pid {pid}) fires it within a second",
    "cron": "{after}cron's next `loopctl tick` fires it, within a minute",
    "cron_silent": ("{after}cron's next `loopctl tick` should fire it, but no tick has "
                    "reached this home lately: see `loopctl doctor`"),
    "none": ("kept, but no driver is running, so nothing fires it: start one with "
             "`loopctl daemon` or `loopctl cron install` (`loopctl tick` fires it once)"),
}


def read_payload(source: str) -> str:
    """The payload's bytes, read no further than the limit allows, checked."""
    from loopctl.domain.gates import MAX_PAYLOAD, check_payload

    try:
        if source == "-":
            data = sys.stdin.buffer.read(MAX_PAYLOAD + 1)
        else:
            with open(source, "rb") as handle:
                data = handle.read(MAX_PAYLOAD + 1)
    except OSError as exc:
        fail(f"bad --payload {source[:200]!r}: {exc.strerror}; expected a readable file or '-'")
    return check_payload(data)
