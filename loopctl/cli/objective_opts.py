"""`update --prompt TEXT|--prompt-file FILE --new-objective`: replace what a
loop is for, keeping its history, runs and limits, as a hand edit of
`prompt:` in loops.yaml does. The acknowledgement is required because the
runs before and after then served different objectives (DESIGN §4:
`update` changes policy; this is the one objective change it makes, on
request)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from loopctl.cli.options import fail

NewObjective = Annotated[bool, typer.Option("--new-objective", help="Confirm that --prompt or --prompt-file replaces what the loop is for.")]  # noqa: E501


def objective_changes(name: str, prompt: str | None, prompt_file: Path | None,
                      new_objective: bool) -> dict[str, Any]:
    """The new prompt (or file) as loops.yaml keys, the other one cleared."""
    if prompt is None and prompt_file is None:
        if new_objective:
            fail("--new-objective goes with --prompt TEXT or --prompt-file FILE")
        return {}
    if prompt is not None and prompt_file is not None:
        fail("give --prompt or --prompt-file, not both")
    given = "--prompt" if prompt is not None else "--prompt-file"
    if not new_objective:
        fail(f"{given} changes what loop {name!r} is for: add --new-objective to confirm (its "
             "history, runs and limits are kept, as when you edit `prompt:` in loops.yaml), "
             "or start a new loop under another --name")
    if prompt is not None:
        return {"prompt": prompt, "prompt_file": None}
    assert prompt_file is not None
    if not prompt_file.is_file():
        fail(f"bad --prompt-file {prompt_file}: no such file")
    return {"prompt_file": str(prompt_file.expanduser().absolute()), "prompt": None}
