"""The Typer app: every command registered in one place, in the order `--help`
lists them; the commands live in one module per group of verbs.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from typing import Annotated, Any, NoReturn

import typer

from loopctl import __version__
from loopctl.cli import (
    completion,
    control,
    drivers,
    exporting,
    notes,
    run_views,
    serving,
    setup,
    team_store,
    trigger,
    views,
)
from loopctl.cli import define as defining
from loopctl.cli.failure import report, say, wants_json
from loopctl.cli.help_panels import PANEL_OF, PanelGroup
from loopctl.domain.errors import EXIT_INTERRUPTED

# After the command list of `loopctl --help` (\b: printed as written, not rewrapped).
EXAMPLES = """\b
Examples (the default --agent, shell, runs the prompt as a command):
  loopctl start --name disk --every 10m "df -h ."
  loopctl run disk              # now, in the foreground
  loopctl cron install          # or keep `loopctl daemon` running
  loopctl start --name ci --every 1h --agent claude "fix the build"
More: loopctl COMMAND --help, man loopctl, man 5 loops.yaml."""

app = typer.Typer(
    name="loopctl", cls=PanelGroup, add_completion=True, no_args_is_help=True,
    rich_markup_mode=None, pretty_exceptions_enable=False,
    help="Run AI coding agents on a schedule, as boringly as cron.",
    epilog=EXAMPLES,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def version_callback(value: bool) -> None:
    if value:
        print(f"loopctl {__version__}")
        raise typer.Exit(0)


@app.callback()
def main(version: Annotated[bool, typer.Option(
        "--version", callback=version_callback, is_eager=True,
        help="Print the version and exit.")] = False) -> None:
    """Run AI coding agents on a schedule, as boringly as cron.

    Files live under $LOOPCTL_HOME when set, else the user's config dir
    (loops.yaml) and state dir (runs, logs, lease).
    """


# Registered here, in the order `--help` lists them (the man page and the
# completions follow it): the command modules never import the app, so there
# is no import circle.
COMMANDS: list[tuple[str | None, Callable[..., None]]] = [
    (None, defining.start), (None, defining.update), (None, views.watch), ("ls", views.ls),
    (None, views.status), (None, views.show), (None, control.pause), (None, control.resume),
    (None, control.stop), (None, control.rm), (None, setup.validate), (None, drivers.run),
    (None, trigger.trigger), (None, drivers.tick), (None, drivers.daemon), (None, serving.serve),
    (None, run_views.logs),
    (None, run_views.history), (None, notes.notes),
    (None, drivers.decide), (None, setup.agents), (None, setup.doctor), (None, setup.digest),
    (None, run_views.events), ("export", exporting.export_cmd), (None, completion.completion),
]
def _summary(command: Callable[..., Any] | None) -> str | None:
    """The docstring's first paragraph, whole: Click cuts its own summary
    mid-sentence to fit the column (`--help`'s list of commands)."""
    doc = (command.__doc__ or "").strip()
    return " ".join(doc.split("\n\n")[0].split()) or None


for _name, _command in COMMANDS:
    _shown = _name or typer.main.get_command_name(_command.__name__)
    app.command(_name, short_help=_summary(_command),
                rich_help_panel=PANEL_OF.get(_shown))(_command)
    if _name == "ls":
        app.command("list", help="List loops (same as ls).",
                    rich_help_panel=PANEL_OF["list"])(views.ls)
for _group, _group_name in ((setup.notify_app, "notify"), (setup.cron_app, "cron"),
                           (team_store.store_app, "store")):
    for _info in _group.registered_commands:
        _info.short_help = _info.short_help or _summary(_info.callback)
    app.add_typer(_group, name=_group_name, short_help=_group.info.help,
                  rich_help_panel=PANEL_OF.get(_group_name))


def _narrowed(args: list[str]) -> typer.Typer:
    """The app with only the command being run: Typer builds a Click command
    for every registered one (~45 ms of each process's ~170), and a test suite
    or script runs one per process. Options before the command, or a name
    that matches nothing, get the whole app: top-level help, completion and
    "No such command" with its suggestions."""
    if not args or args[0].startswith("-"):
        return app
    commands = [c for c in app.registered_commands
                if (c.name or typer.main.get_command_name(c.callback.__name__
                                                          if c.callback else "")) == args[0]]
    groups = [g for g in app.registered_groups if g.name == args[0]]
    if len(commands) + len(groups) != 1:
        return app
    narrow = copy.copy(app)
    narrow.registered_commands, narrow.registered_groups = commands, groups
    return narrow


def _no_such_option(exc: Any) -> str:
    hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx else ""
    command = exc.ctx.command.name if exc.ctx else None
    from loopctl.domain.loop_settings import OBJECTIVE_OPTIONS

    if command == "update" and exc.option_name in OBJECTIVE_OPTIONS:
        return (f"`update` changes a loop's policy, never its objective, and "
                f"{exc.option_name} is part of the objective (agent, model, env, agent "
                "arguments, cwd): remove the loop with `loopctl rm NAME` and start it again "
                f"with the new {exc.option_name}, or start a new loop under another --name "
                "(only the prompt changes in place: `--prompt TEXT --new-objective`)")
    import difflib

    # click offers up to three loose matches (`--prompt` -> `--pr`): one close one or none.
    best = difflib.get_close_matches(exc.option_name, exc.possibilities or [], 1, 0.75)
    guess = f"; did you mean {best[0]}?" if best else ""
    return f"no such option: {exc.option_name}{guess}{hint}"


def run_app(args: list[str]) -> NoReturn:
    """Run the CLI with one-line errors and the documented exit codes."""
    # Typer 0.29 vendors click as typer._click; its exceptions are only
    # reachable there (typer.Exit and typer.Abort are its own classes).
    from typer._click import exceptions as cx

    as_json = wants_json(args)
    command = typer.main.get_command(_narrowed(args))
    try:
        code = command.main(args, prog_name="loopctl", standalone_mode=False)
    except typer.Exit as exc:
        code = exc.exit_code
    except typer.Abort:
        code = say("interrupted", EXIT_INTERRUPTED, "", as_json)
    except cx.NoArgsIsHelpError as exc:
        print(exc.ctx.get_help() if exc.ctx else "", file=sys.stderr)
        code = 2
    except cx.NoSuchOption as exc:
        code = say(_no_such_option(exc), 2, as_json=as_json)
    except cx.UsageError as exc:
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx else ""
        code = say(f"{exc.format_message()}{hint}", 2, as_json=as_json)
    except cx.ClickException as exc:
        code = say(exc.format_message(), exc.exit_code, as_json=as_json)
    except (Exception, KeyboardInterrupt) as exc:  # one line, not a traceback
        code = report(exc, as_json)
    sys.exit(code if isinstance(code, int) else 0)
