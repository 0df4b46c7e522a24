"""Setting up and checking: `validate`, `agents`, `doctor`, `digest`, `notify`,
`cron`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from loopctl.cli.options import JsonOpt, emit, fail, store
from loopctl.cli.render import paint, terminal_width
from loopctl.commands import common
from loopctl.commands import doctor as checks
from loopctl.commands import setup as setups
from loopctl.domain.durations import parse_duration
from loopctl.domain.untrusted import line


def validate(file: Annotated[Optional[Path], typer.Argument(help="File to check (default: loops.yaml).")] = None,
             as_json: JsonOpt = False) -> None:
    """Check a loops.yaml; exit 3 if unreadable, 2 if an entry is invalid."""
    from loopctl.commands.validation import validate as check_file

    result = check_file(store(), file)
    if as_json:
        emit(result.to_json())
    else:
        for error in result.invalid.values():
            print(f"invalid: {line(error)}")
        for warning in result.warnings:
            print(f"warning: {line(warning)}")
        from loopctl.domain.capacity import Caps

        print(Caps(result.max_concurrent, result.max_concurrent_per_agent).describe())
        print(f"{result.file}: {len(result.valid)} valid, {len(result.invalid)} invalid")
    if result.invalid:
        raise typer.Exit(2)


def agents(as_json: JsonOpt = False) -> None:
    """List the agent presets: installed?, version, the command each runs."""
    import shlex

    from loopctl.engine.containment.sandbox import status_line

    available, sandbox = status_line()
    found = setups.agents({"available": available, "status": sandbox})
    if as_json:
        emit(found.to_json())
        return
    import textwrap

    print(f"sandbox: {sandbox}; a confined run also writes its working directory, "
          "its TMPDIR and its decision folder, and reads the repository loopctl recorded "
          "for the loop; a folder below is granted only if no part of its path is a "
          "symbolic link (else the run fails: sandbox refused PATH)")

    for row in found.agents:
        said = row.version or ("installed" if row.path else "not on PATH")
        command = shlex.join(row.argv) + (" < PROMPT" if row.prompt_on_stdin else "")
        print(f"{paint(row.preset, 'bold')}  ({said}; decisions: {row.verified})")
        print(textwrap.fill(command, width=max(terminal_width() - 2, 40), initial_indent="    ",
                            subsequent_indent="      ", break_on_hyphens=False,
                            break_long_words=False))
        _say_confinement(row)


def _say_confinement(row: setups.AgentRow) -> None:
    """Under `--sandbox auto` (the default) an agent preset is confined; the
    shell preset runs the user's own commands, unconfined unless `on`."""
    writes = ", ".join(row.sandbox_write)
    if row.confined_by_default:
        print(f"    confined, may write: {writes}")
    else:
        print(f"    unconfined (--sandbox auto); with --sandbox on, may write: {writes}")
    if row.install and not row.path:
        print(f"    install: {row.install}")


def doctor(as_json: JsonOpt = False,
           notify: Annotated[Optional[list[str]], typer.Option(help="Apprise URL, or a name from notify_targets: in loops.yaml, told when unhealthy, silent when healthy: a dead-man's switch for cron (repeatable).")] = None) -> None:
    """Check files, lease, overdue and expiring loops, agents, hooks; exit 1 if unwell."""
    s = store()
    report = checks.doctor(s)
    if notify and not report.healthy:
        problems = report.errors()
        report = report.sent(setups.send_notification(
            setups.resolve_targets(s, notify),
            f"loopctl: {len(problems)} problem(s) on {os.uname().nodename}",
            "\n".join(problems), s.paths.state_dir, setups.target_names(s)))
        _print_delivery(report.notified or [], to_stderr=as_json)
    if as_json:
        emit(report.to_json())
    else:
        marks = {"ok": "ok  ", "warn": "WARN", "error": "FAIL"}
        styles = {"ok": "green", "warn": "yellow", "error": "red"}
        for finding in report.findings:
            print(f"{paint(marks[finding['level']], styles[finding['level']])} "
                  + line(f"{finding['check']}: {finding['message']}"))
        print("healthy" if report.healthy else "needs attention")
    raise typer.Exit(0 if report.healthy else 1)


def _print_delivery(results: list[dict[str, Any]], to_stderr: bool = False) -> None:
    for r in results:
        target = f"{r['name']} ({r['target']})" if r.get("name") else r["target"]
        print(line(f"notify {target}: {'sent' if r['ok'] else 'FAILED: ' + str(r['error'])}"),
              file=sys.stderr if to_stderr else sys.stdout)


def digest(since: Annotated[str, typer.Option(help="How far back, like 24h or 7d.")] = "24h",
           as_json: JsonOpt = False,
           notify: Annotated[Optional[list[str]], typer.Option(help="Also send the digest to this Apprise URL, or a name from notify_targets: in loops.yaml (repeatable).")] = None) -> None:
    """What happened since a time: needs you, runs, decisions, cost, events."""
    from loopctl.domain import digest as report

    s = store()
    result = setups.digest(s, parse_duration(since, "--since"))
    text = report.render(result)
    notified = None
    if notify:
        notified = setups.send_notification(setups.resolve_targets(s, notify),
                                            "loopctl digest", text, s.paths.state_dir,
                                            setups.target_names(s))
        result = result.sent(notified)
    if as_json:
        emit(result.to_json())
    else:
        print(text, end="")
    if notified is not None:
        _print_delivery(notified, to_stderr=as_json)
        if not all(r["ok"] for r in notified):
            raise typer.Exit(1)


notify_app = typer.Typer(help="Notification targets (Apprise URLs).", no_args_is_help=True)




@notify_app.command("test")
def notify_test(url: Annotated[Optional[str], typer.Argument(help="An Apprise URL or a name from notify_targets: (default: the loop's, or every loop's, targets).")] = None,
                loop: Annotated[Optional[str], typer.Option("--loop", help="Test this loop's targets.")] = None,
                as_json: JsonOpt = False) -> None:
    """Send a test message and report each target's result; exit 1 if one failed."""
    s = store()
    urls = setups.resolve_targets(s, [url]) if url else setups.notify_targets(s, loop)
    if not urls:
        fail("no notification targets: give a URL, or set one with "
             "`loopctl update NAME --notify URL`")
    results = setups.send_notification(urls, "loopctl: test notification",
                                     f"This is a test from loopctl on {os.uname().nodename}.",
                                     s.paths.state_dir, setups.target_names(s))
    if as_json:
        emit({"version": common.JSON_VERSION, "results": results})
    else:
        _print_delivery(results)
    raise typer.Exit(0 if all(r["ok"] for r in results) else 1)


cron_app = typer.Typer(help="Install, remove or check the crontab line that runs `loopctl tick`.",
                       no_args_is_help=True, rich_markup_mode=None)




@cron_app.command("install")
def cron_install(as_json: JsonOpt = False) -> None:
    """Add the every-minute `loopctl tick` line, pinned to this home, to your crontab."""
    from loopctl.integrations import crontab

    result = crontab.install(store())
    if as_json:
        emit(result)
        return
    print(("installed: " if result["changed"] else "already installed: ") + result["line"])
    from loopctl.domain.untrusted import line

    for old in result["replaced"]:
        edited = " (edited by hand since loopctl wrote it)" \
            if old in result["hand_edited"] else ""
        print(f"replaced{edited}: {line(old)}", file=sys.stderr)  # no escapes reach the tty
    if not crontab.cron_daemon_running():
        print("warning: no cron daemon is running; start cron or use `loopctl daemon`",
              file=sys.stderr)


@cron_app.command("uninstall")
def cron_uninstall(as_json: JsonOpt = False) -> None:
    """Remove exactly loopctl's line from your crontab."""
    from loopctl.integrations import crontab

    result = crontab.uninstall(store())
    if as_json:
        emit(result)
    else:
        print("removed the loopctl line" if result["changed"] else "no loopctl line to remove")


@cron_app.command("status")
def cron_status(as_json: JsonOpt = False) -> None:
    """Say whether the crontab line is there and whether cron is running."""
    from loopctl.integrations import crontab

    result = crontab.status(store())
    if as_json:
        emit(result)
        return
    print(f"crontab line: {'installed' if result['installed'] else 'not installed'}")
    print(f"cron daemon:  {'running' if result['cron_running'] else 'not running'}")
    if result["installed"]:
        print(f"last tick:    {result['last_tick'] or 'none has reached this home yet'}")
        print(f"tick log:     {result['log']}")
