"""`loopctl completion bash|zsh|fish`: the shell's completion script, the
text gendocs writes to completions/, for installs whose `share/` no shell
searches (a venv, pipx)."""

from __future__ import annotations

from typing import Annotated

import typer

from loopctl.domain.errors import UsageError

SHELLS = ("bash", "zsh", "fish")



def completion(shell: Annotated[str, typer.Argument(
        help="bash, zsh or fish.", metavar="SHELL")]) -> None:
    """Print the completion script for bash, zsh or fish."""
    if shell not in SHELLS:
        raise UsageError(f"no completion for {shell[:32]!r}: expected bash, zsh or fish")
    from loopctl.cli import gendocs

    print(gendocs.script(shell), end="")
