"""`--if`, `--if-timeout` and `--on-demand` (DESIGN §17), for `start` and `update`."""

from __future__ import annotations

from typing import Any


def gate_changes(gate: str | None, if_timeout: str | None,
                 on_demand: bool | None) -> dict[str, Any]:
    """The options as loops.yaml keys; `--if none` clears (None), an absent
    option is left out. Checked by the one set of rules (parse_gate)."""
    from loopctl.domain.gates import parse_gate

    out: dict[str, Any] = {}
    if gate is not None:
        out["if"] = None if gate == "none" else gate
    if if_timeout is not None:
        out["if_timeout"] = if_timeout
    parse_gate({k: v for k, v in out.items() if v is not None}, "bad option")
    if on_demand:
        out["on_demand"] = True
    return out
