"""`loopctl store init|status`: the team store of DESIGN §21."""

from __future__ import annotations

import sys

import typer

from loopctl.cli.options import JsonOpt, emit
from loopctl.domain.errors import EXIT_UNREADABLE

store_app = typer.Typer(help="Set up or check the team store (PostgreSQL) shared by machines.",
                        no_args_is_help=True, rich_markup_mode=None)


@store_app.command("init")
def store_init(as_json: JsonOpt = False) -> None:
    """Create the store's schema, or migrate it to this loopctl's version."""
    from loopctl.commands import team_store

    result = team_store.init()
    if as_json:
        emit(result.to_json())
    elif result.before == result.after:
        print(f"store {result.store}: schema version {result.after}, already current")
    else:
        print(f"store {result.store}: schema version {result.before} -> {result.after}")


@store_app.command("status")
def store_status(as_json: JsonOpt = False) -> None:
    """Say which store this home uses, whether it answers, and its schema
    version; exit 3 when it cannot be used."""
    from loopctl.commands import team_store

    result = team_store.status()
    if as_json:
        emit(result.to_json())
    elif result.store is None:
        print(team_store.NO_STORE)
    else:
        print(f"store:   {result.store}")
        print(f"machine: {result.machine}")
        if result.reachable:
            print(f"server:  PostgreSQL {result.server}")
            print(f"schema:  version {result.schema_version or 'none'} "
                  f"(this loopctl: {result.code_version})")
    for warning in result.warnings:
        print(f"loopctl: warning: {warning}", file=sys.stderr)
    if result.problem:
        print(f"loopctl: error: {result.problem}", file=sys.stderr)
    if not result.ok:
        raise typer.Exit(EXIT_UNREADABLE)
