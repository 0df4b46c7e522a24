"""`tick`'s options, the one list: the Typer command declares them from here,
`cli.direct` runs a tick given only these, and the idle fast path in
`loopctl.entry` takes the ones that print nothing when nothing is due.
Import-free: the idle tick reads it."""

TICK_OPTIONS = {"wait": ("--wait",), "as_json": ("--json",), "quiet": ("--quiet", "-q")}
FAST_TICK_FLAGS = set(TICK_OPTIONS["quiet"])
