"""Test set-up of LoopState records: several fields at once, as a run, a
queue or a pause would leave them, each name checked against the schema (a
typo must fail the test, not add a field state.json then writes)."""

from __future__ import annotations

from typing import Any

from loopctl.domain.state import SCHEMA, LoopState


def set_fields(st: LoopState, **fields: Any) -> None:
    unknown = sorted(set(fields) - set(SCHEMA))
    assert not unknown, f"no state field {unknown}"
    for key, value in fields.items():
        setattr(st, key, value)
