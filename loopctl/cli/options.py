"""What the command modules share: the store, `--json`, the loop-name argument,
one-line failures.
"""

from __future__ import annotations

from typing import Annotated, Any, NoReturn

import typer

from loopctl.cli.flags import VIEW_OPTIONS
from loopctl.domain.errors import LoopctlError
from loopctl.domain.timestamps import parse_iso
from loopctl.storage.store import Store

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (stable shape).")]
# `ls`'s and `status`'s, from the table their route without Typer reads too.
ViewJsonOpt = Annotated[bool, typer.Option(*VIEW_OPTIONS["as_json"],
                                           help="Print JSON (stable shape).")]


NameArg = Annotated[str, typer.Argument(help="Loop name.", show_default=False)]


def store() -> Store:
    return Store()


def emit(data: Any) -> None:
    from loopctl.cli.direct import emit as emit_json

    emit_json(data)


def fail(message: str, code: int = 2) -> NoReturn:
    raise LoopctlError(message, code)


def ts(text: str | None) -> float | None:
    return parse_iso(text) if text else None


