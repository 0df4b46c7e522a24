"""What a loop is for: its prompt, its prompt file, or (a `--command` loop
whose program needs none) neither."""

from __future__ import annotations

from loopctl.domain.checks import shell_join
from loopctl.domain.errors import UsageError

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

    from loopctl.domain.model import LoopDef


def check_objective(raw: dict[str, Any], prompt: str | None, prompt_file: str | None,
                    where: str) -> None:
    """One of `prompt` and `prompt_file`; a `command` loop may give neither
    (its program needs no prompt: its stdin is empty), unless the command
    names one with a placeholder."""
    if prompt is not None and prompt_file is not None:
        raise UsageError(f"{where}: give one of 'prompt' or 'prompt_file', not both")
    if prompt is not None and not prompt.strip():
        raise UsageError(f"{where}: 'prompt' is empty")
    if prompt is not None or prompt_file is not None:
        return
    command = raw.get("command")
    if command is None:
        raise UsageError(f"{where}: give 'prompt' or 'prompt_file' (only a 'command' loop "
                         "may go without)")
    words = [command] if isinstance(command, str) else command
    used = [p for p in ("{prompt}", "{prompt_file}")
            if isinstance(words, list) and any(p in str(w) for w in words)]
    if used:
        raise UsageError(f"{where}: 'command' uses {used[0]} but the loop has no prompt; "
                         "give one (or 'prompt_file'), or drop the placeholder")


def objective_of(loop: LoopDef) -> str:
    """What the loop is for, as one text: its prompt, `file:PATH`, or, for a
    command loop without a prompt, `command: ARGV`."""
    if loop.prompt is not None:
        return loop.prompt
    if loop.prompt_file is not None:
        return f"file:{loop.prompt_file}"
    return "command: " + shell_join(loop.command or ())
