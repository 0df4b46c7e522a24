"""`notes`: print or empty a loop's notes (DESIGN §16)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from loopctl.cli.options import JsonOpt, NameArg, emit, store


def notes(
    name: NameArg,
    clear: Annotated[bool, typer.Option("--clear", help="Empty the notes (the next run starts with none).")] = False,  # noqa: E501
    as_json: JsonOpt = False,
) -> None:
    """Print a loop's notes, kept across runs with --notes (or empty them)."""
    from loopctl.commands.notes import notes as read
    from loopctl.domain.untrusted import block

    result = read(store(), name, clear)
    if as_json:
        emit(result.to_json())
        return
    if clear:
        print(f"cleared the notes of {name}" if result.cleared
              else f"{name} had no notes")
        return
    if not result.notes:
        hint = "" if result.enabled else f" (it keeps none: `loopctl update {name} --notes`)"
        print(f"{name} has no notes{hint}", file=sys.stderr)
        return
    # The agent wrote them: no escape sequence or bidi override reaches the terminal.
    text = block(result.notes)
    print(text, end="" if text.endswith("\n") else "\n")
