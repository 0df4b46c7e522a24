"""The options of the commands that have a route without Typer, one table
per command: the Typer command declares its options from the table, and
`plain` reads the plain forms that route takes, so the two cannot differ.

`tick` (cron, every minute) and `run NAME` (CI, scripts) keep that route:
through Typer they would miss the round's goals (bench/README.md, "One
parser per command"). So do `ls` and `status [NAME] --json`, the views
people and scripts read most: Typer would double their CPU (~110 -> ~220
ms). Every other command, and any other form of these (`--help`, a value
option, `--opt=value`, an unknown option), goes to the Typer app, which
says what is wrong. Import-free: the idle tick reads it."""

from __future__ import annotations

TICK_OPTIONS: dict[str, tuple[str, ...]] = {
    "wait": ("--wait",), "as_json": ("--json",), "quiet": ("--quiet", "-q")}
# The ones that print nothing when nothing is due: the idle exit in loopctl.entry.
FAST_TICK_FLAGS = set(TICK_OPTIONS["quiet"])
# `run`'s switches (its one value option, --slot, is parsed by Typer only).
RUN_OPTIONS: dict[str, tuple[str, ...]] = {"scheduled": ("--scheduled",), "force": ("--force",)}
# `ls`'s and `status`'s switch (their value options, --status and --sort,
# are parsed by Typer only).
VIEW_OPTIONS: dict[str, tuple[str, ...]] = {"as_json": ("--json",)}


def plain(args: list[str], options: dict[str, tuple[str, ...]],
          arguments: int = 0) -> tuple[list[str], set[str]] | None:
    """`arguments` leading arguments (none starting with `-`), then only
    switches of `options` (repeats allowed, as Click allows them): the
    arguments and the names of the switches given. None for any other form,
    for Typer to parse."""
    given, switches = args[:arguments], args[arguments:]
    if len(given) < arguments or any(arg.startswith("-") for arg in given):
        return None
    names = {flag: name for name, flags in options.items() for flag in flags}
    if any(flag not in names for flag in switches):
        return None
    return given, {names[flag] for flag in switches}
