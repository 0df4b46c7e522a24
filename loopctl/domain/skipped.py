"""A due slot that did not run (DESIGN §20), as one typed record: a line of
`runs/<loop>/skipped.jsonl`, a skip marker of the team outbox, a row of the
team store's `skipped_slots`, an entry of `history NAME --skipped`.

- written: `slots.skip` builds one; `to_json()` is the line loopctl has
  always written, byte for byte once dumped: `slot`, `reason` and `at`
  always, then each optional field that is set, in a fixed order (which is
  the order every caller gave them in: tests/domain/test_skipped_slot.py).
- read: `SkippedSlot.from_json(data)` checks what a line, a marker or a row
  held, field by field (the runs folder is agent-writable, the store is
  shared): a value loopctl would not write refuses the whole entry (None),
  never a guessed one. A key loopctl does not write is not carried.
"""

from __future__ import annotations

from loopctl.fast.data_class import record
from loopctl.fast.lazy_re import lazy

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# Why a due slot did not run (DESIGN §20); `history --skipped` shows these.
REASONS = ("missed", "catch_up_none", "outside_window", "overlap_skip", "gate_no_work",
           "deferred", "held", "definition_differs")
# What deferred a slot (`deferred`, counted when the loop resumes).
DEFERRED_BY = ("usage_limit",)
# The account mark's kind a `held` slot waited on (domain/accounts.KINDS).
HELD_KINDS = ("rate_limited", "auth_required")
MAX_SLOT = 200  # a slot's label: `schedule:ISO`, `trigger:ISO`, `manual:RUN_ID`
MAX_MACHINE = 100  # commands/team_runs.machine_of
MAX_COUNT = 10**9
# What timestamps.iso writes (a day 31 of a short month is not told apart:
# it is still one line of fixed characters).
_ISO = lazy(r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
            r"T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]Z")


@record(frozen=True)
class SkippedSlot:
    """One skipped slot; `slot` None: no one instant (a folded count)."""

    slot: str | None
    reason: str
    at: str | None  # when it was recorded (None: a gated run with no times)
    count: int | None = None  # slots it stands for (a catch-up's, a deferral's)
    run_id: str | None = None  # the run it was folded into or overlapped
    by: str | None = None  # DEFERRED_BY
    kind: str | None = None  # HELD_KINDS
    machine: str | None = None  # the team store's machine that skipped it

    def to_json(self) -> dict[str, Any]:
        """The line's mapping: the optional fields only when set."""
        shape: dict[str, Any] = {"slot": self.slot, "reason": self.reason, "at": self.at}
        for key in OPTIONAL:
            value = getattr(self, key)
            if value is not None:
                shape[key] = value
        return shape

    @classmethod
    def from_json(cls, data: Any) -> SkippedSlot | None:
        """The record `data` holds, each field checked; None: not one loopctl writes."""
        if not isinstance(data, dict):
            return None
        reason, at, slot = data.get("reason"), _at(data.get("at")), data.get("slot")
        if reason not in REASONS or at is None or slot is not None and _slot(slot) is None:
            return None
        # A field absent reads None; one present must be right, or none is.
        optional = {}
        for key, check in CHECKS.items():
            value = data.get(key)
            if value is not None:
                if check(value) is None:
                    return None
                optional[key] = value
        return cls(slot, reason, at, **optional)


OPTIONAL = ("count", "run_id", "by", "kind", "machine")


def _printable(value: Any, limit: int) -> str | None:
    from loopctl.domain.untrusted import text

    found = text(value, limit)
    return found if found and found.isprintable() else None


def _slot(value: Any) -> str | None:
    found = _printable(value, MAX_SLOT)
    return found if found and found.partition(":")[0] in ("schedule", "trigger", "manual") \
        else None


def _choice(value: Any, allowed: tuple[str, ...]) -> str | None:
    return value if isinstance(value, str) and value in allowed else None


def _at(value: Any) -> str | None:
    """A time as loopctl writes it (timestamps.iso): `2027-01-15T09:00:07Z`."""
    return value if isinstance(value, str) and _ISO.fullmatch(value) else None


def _count(value: Any) -> int | None:
    from loopctl.domain.untrusted import count

    return count(value, MAX_COUNT)


def _run_id(value: Any) -> str | None:
    from loopctl.domain.names import is_run_id

    return value if is_run_id(value) else None


def _machine(value: Any) -> str | None:
    return _printable(value, MAX_MACHINE)


# Each optional field's check (None: refused), in OPTIONAL's order.
CHECKS: dict[str, Callable[[Any], object]] = {
    "count": _count, "run_id": _run_id, "by": lambda v: _choice(v, DEFERRED_BY),
    "kind": lambda v: _choice(v, HELD_KINDS), "machine": _machine}
