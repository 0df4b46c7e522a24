"""`--if`, `--if-timeout` and `--on-demand` (DESIGN §17), for `start` and `update`."""

from __future__ import annotations

from typing import Any


def gate_changes(gate: str | None, if_timeout: str | None,
                 on_demand: bool | None) -> dict[str, Any]:
    """The options as loops.yaml keys; `--if none` clears (None), an absent
    option is left out. Read once, by parse_loop (parse_gate, the rows)."""
    out: dict[str, Any] = {}
    if gate is not None:
        out["if"] = None if gate == "none" else gate
    if if_timeout is not None:
        out["if_timeout"] = if_timeout
    if on_demand:
        out["on_demand"] = True
    return out
