"""`pause`, `resume`, `stop` and `rm`."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from loopctl.cli.options import JsonOpt, NameArg, emit, store
from loopctl.commands import control as controls


def pause(name: NameArg, as_json: JsonOpt = False) -> None:
    """Pause a loop (a run in flight finishes first)."""
    _control(name, "pause", False, as_json)


def resume(name: NameArg,
           answer: Annotated[Optional[str], typer.Option(metavar="TEXT|-", help="Answer the question of the agent that blocked the loop (at most 64 KiB of UTF-8; '-': stdin); its next run reads it, as data, in its envelope and at $LOOPCTL_ANSWER_FILE.")] = None,  # noqa: E501
           as_json: JsonOpt = False) -> None:
    """Resume a paused loop (refused while a limit is still reached)."""
    if answer == "-":
        answer = sys.stdin.buffer.read(64 * 1024 + 1).decode("utf-8", "surrogateescape")
    _control(name, "resume", False, as_json, answer)


def stop(name: NameArg,
         kill: Annotated[bool, typer.Option("--kill", help="Kill the run in flight now.")] = False,
         as_json: JsonOpt = False) -> None:
    """Stop a loop for good (a run in flight finishes first, unless --kill)."""
    _control(name, "stop", kill, as_json)


def _control(name: str, verb: str, kill: bool, as_json: bool, answer: str | None = None) -> None:
    result = controls.control(store(), name, verb, kill=kill, answer=answer)
    if as_json:
        emit(result.to_json())
    else:
        print(f"{name}: {result.message}")


def rm(name: NameArg,
       keep_logs: Annotated[bool, typer.Option("--keep-logs", help="Keep the run logs.")] = False,
       as_json: JsonOpt = False) -> None:
    """Remove a loop's definition, state and (unless --keep-logs) its logs."""
    result = controls.remove(store(), name, keep_logs)
    if as_json:
        emit(result.to_json())
    else:
        print(f"removed {name}")
        for branch in result.kept_branches:
            # The user's work: commits no remote has.
            print(f"kept branch {branch} (it has commits no remote has; "
                  f"`git branch -D {branch}` when done with it)")
