"""`pause`, `resume`, `stop` and `rm`."""

from __future__ import annotations

from typing import Annotated

import typer

from loopctl.cli.options import JsonOpt, NameArg, emit, store
from loopctl.commands import control as controls


def pause(name: NameArg, as_json: JsonOpt = False) -> None:
    """Pause a loop (a run in flight finishes first)."""
    _control(name, "pause", False, as_json)


def resume(name: NameArg, as_json: JsonOpt = False) -> None:
    """Resume a paused loop (refused while a limit is still reached)."""
    _control(name, "resume", False, as_json)


def stop(name: NameArg,
         kill: Annotated[bool, typer.Option("--kill", help="Kill the run in flight now.")] = False,
         as_json: JsonOpt = False) -> None:
    """Stop a loop for good (a run in flight finishes first, unless --kill)."""
    _control(name, "stop", kill, as_json)


def _control(name: str, verb: str, kill: bool, as_json: bool) -> None:
    result = controls.control(store(), name, verb, kill=kill)
    if as_json:
        emit(result)
    else:
        print(f"{name}: {result['message']}")


def rm(name: NameArg,
       keep_logs: Annotated[bool, typer.Option("--keep-logs", help="Keep the run logs.")] = False,
       as_json: JsonOpt = False) -> None:
    """Remove a loop's definition, state and (unless --keep-logs) its logs."""
    result = controls.remove(store(), name, keep_logs)
    if as_json:
        emit(result)
    else:
        print(f"removed {name}")
        for branch in result["kept_branches"]:
            # The user's work: commits no remote has.
            print(f"kept branch {branch} (it has commits no remote has; "
                  f"`git branch -D {branch}` when done with it)")
