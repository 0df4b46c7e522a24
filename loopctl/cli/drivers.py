"""What fires runs: `run`, `tick`, `daemon`, and `decide` from inside a run."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from loopctl.cli.flags import TICK_OPTIONS
from loopctl.cli.options import NameArg, fail, store


def run(name: NameArg,
        scheduled: Annotated[bool, typer.Option("--scheduled", help="For external schedulers: fire only if `tick` would (active, within limits, nothing in flight); else say why and exit 0.")] = False,
        force: Annotated[bool, typer.Option("--force", help="Run even a paused or finished loop.")] = False) -> None:
    """Run a loop now, in the foreground; exit code is the run's."""
    from loopctl.cli import direct

    if scheduled and force:
        fail("give --scheduled or --force, not both")
    raise typer.Exit(direct.run(name, "scheduled" if scheduled else "force" if force
                                else "manual"))


def tick(
    wait: Annotated[bool, typer.Option(*TICK_OPTIONS["wait"], help="Wait for the runs; exit 1 if one failed, 124 if one timed out.")] = False,
    as_json: Annotated[bool, typer.Option(*TICK_OPTIONS["as_json"], help="Print JSON (stable shape).")] = False,
    quiet: Annotated[bool, typer.Option(*TICK_OPTIONS["quiet"], help="Print nothing but errors.")] = False,
) -> None:
    """Fire every due loop once and exit (for cron and CI)."""
    from loopctl.cli import direct

    raise typer.Exit(direct.tick(wait, as_json, quiet))


def daemon(quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not log to stderr.")] = False) -> None:
    """Hold the lease and fire loops as they come due, until SIGTERM/SIGINT."""
    from loopctl.engine.daemon import Daemon

    raise typer.Exit(Daemon(store(), quiet=quiet).run())


def decide(
    decision: Annotated[str, typer.Argument(help="continue, complete, fail or block.")],
    summary: Annotated[Optional[str], typer.Option(help="What happened in this run.")] = None,
    evidence: Annotated[Optional[str], typer.Option(help="How you know.")] = None,
    next_: Annotated[Optional[str], typer.Option("--next", metavar="DURATION", help="With continue on auto pace: delay before the next run.")] = None,
) -> None:
    """Report this run's decision (only inside a run started by loopctl)."""
    from loopctl.cli import direct

    raise typer.Exit(direct.decide(decision, summary, evidence, next_))
