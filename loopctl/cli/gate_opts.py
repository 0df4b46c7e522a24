"""`--if`, `--if-timeout` and `--on-demand` (DESIGN §17), for `start` and `update`."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from loopctl.cli.setting_opts import OptionGroup

If = Annotated[Optional[str], typer.Option("--if", metavar="CMD", help="Gate run before each fire, split like --command: exit 0 runs the agent, 1 skips the fire ('none' clears).")]  # noqa: E501
IfTimeout = Annotated[Optional[str], typer.Option("--if-timeout", help="Kill the gate after this long (default 2m); a timeout is a gate_error.")]  # noqa: E501
OnDemand = Annotated[bool, typer.Option("--on-demand", help="No time schedule: fired only by `loopctl trigger` (and `run`).")]  # noqa: E501
GATE_OPTS: OptionGroup = {"gate": (If, None), "if_timeout": (IfTimeout, None),
                          "on_demand": (OnDemand, False)}


def gate_changes(gate: str | None, if_timeout: str | None, on_demand: bool) -> dict[str, Any]:
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
