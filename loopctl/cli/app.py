"""The Typer app: one thin function per command; the work is in `core`."""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any, NoReturn, Optional

import typer

from loopctl import __version__, clock
from loopctl.cli.render import STATUS_STYLE, ago, paint, relative, table
from loopctl.commands import core
from loopctl.domain.durations import format_duration, format_rough, parse_duration
from loopctl.domain.errors import EXIT_INTERRUPTED, LoopctlError, report
from loopctl.domain.model import CATCH_UP, OVERLAP, PRESETS, check_env_pair
from loopctl.domain.schedule import parse_iso
from loopctl.domain.untrusted import line
from loopctl.storage.store import Store

app = typer.Typer(
    name="loopctl", add_completion=True, no_args_is_help=True,
    rich_markup_mode=None, pretty_exceptions_enable=False,
    help="Run AI coding agents on a schedule, as boringly as cron.",
    context_settings={"help_option_names": ["-h", "--help"]},
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (stable shape).")]
NameArg = Annotated[str, typer.Argument(help="Loop name.", show_default=False)]


def store() -> Store:
    return Store()


def emit(data: Any) -> None:
    from loopctl.cli.direct import emit as emit_json

    emit_json(data)


def fail(message: str, code: int = 2) -> NoReturn:
    raise LoopctlError(message, code)


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


# -- definitions ------------------------------------------------------------------


def _duration(value: str | None, what: str) -> str | None:
    if value is None:
        return None
    parse_duration(value, what)
    return value


def policy_changes(*, timeout: str | None, for_: str | None, max_runs: int | None,
                   max_failures: int | None, no_progress: int | None,
                   budget_usd: float | None, until: str | None, overlap: str | None,
                   catch_up: str | None, on_attention: str | None, keep_runs: int | None,
                   every: str | None = None, cron: str | None = None,
                   tz: str | None = None, min_delay: str | None = None,
                   max_delay: str | None = None,
                   notify: list[str] | None = None) -> dict[str, Any]:
    """Options given on the command line, as loops.yaml keys (None: not given)."""
    if overlap is not None and overlap not in OVERLAP:
        fail(f"bad --overlap {overlap!r}: expected one of {', '.join(OVERLAP)}")
    if catch_up is not None and catch_up not in CATCH_UP:
        fail(f"bad --catch-up {catch_up!r}: expected one of {', '.join(CATCH_UP)}")
    if every is not None and cron is not None:
        fail("give --every or --cron, not both")
    if tz is not None and cron is None:
        fail("--tz only applies to --cron schedules")
    if every is not None and every != "auto":
        _duration(every, "--every")
    clear = object()  # `--on-attention none` removes the hook
    hook: object = on_attention
    if on_attention == "none":
        hook = clear
    elif on_attention is not None:
        if not on_attention.strip():
            fail("bad --on-attention '': expected the path of an executable, "
                 "or 'none' to remove the hook")
        hook = str(Path(on_attention).expanduser().absolute())
    given = {
        "timeout": _duration(timeout, "--timeout"), "for": _duration(for_, "--for"),
        "max_runs": max_runs, "max_failures": max_failures, "no_progress": no_progress,
        "budget_usd": budget_usd, "until": until, "overlap": overlap,
        "catch_up": catch_up, "on_attention": hook, "keep_runs": keep_runs,
        "every": every, "cron": cron, "tz": tz,
        "min_delay": _duration(min_delay, "--min-delay"),
        "max_delay": _duration(max_delay, "--max-delay"),
    }
    if notify:
        from loopctl.integrations.notify import check_urls

        # `--notify none` clears the list (with others: they replace it).
        given["notify"] = check_urls(notify) or clear
    # None in the result means "remove this key" (core.update).
    return {k: None if v is clear else v for k, v in given.items() if v is not None}


Timeout = Annotated[Optional[str], typer.Option(help="Kill a run after this long (default 1h).")]
For = Annotated[Optional[str], typer.Option("--for", help="Calendar lifetime from the start (default 7d).")]
MaxRuns = Annotated[Optional[int], typer.Option(min=0, help="Runs allowed in all (default 50; 0 = unlimited).")]
MaxFailures = Annotated[Optional[int], typer.Option(min=0, help="Consecutive failures before pausing (default 3).")]
NoProgress = Annotated[Optional[int], typer.Option(min=0, help="Identical results in a row before pausing (default 3).")]
Budget = Annotated[Optional[float], typer.Option(help="Pause before a run once this many USD are spent.")]
Until = Annotated[Optional[str], typer.Option(help="Complete when the agent's final result contains this text.")]
Overlap = Annotated[Optional[str], typer.Option(help="A fire due during a run: queue (default), skip or replace.")]
CatchUp = Annotated[Optional[str], typer.Option(help="After downtime: one catch-up run (default) or none.")]
OnAttention = Annotated[Optional[str], typer.Option(help="Executable given attention events on stdin ('none' removes it).")]
KeepRuns = Annotated[Optional[int], typer.Option(min=1, help="Run logs kept per loop (default 50).")]
Every = Annotated[Optional[str], typer.Option(help="Interval after each run ends (10m, 1h30m) or 'auto'.")]
Cron = Annotated[Optional[str], typer.Option(help="Five-field cron expression.")]
Tz = Annotated[Optional[str], typer.Option(help="IANA zone for --cron (default: the system's).")]
MinDelay = Annotated[Optional[str], typer.Option(help="With --every auto: shortest delay (default 1m).")]
Notify = Annotated[Optional[list[str]], typer.Option(help="Apprise URL told about attention events (repeatable; 'none' clears).")]
Worktree = Annotated[Optional[bool], typer.Option("--worktree/--no-worktree", help="Run each fire in a fresh git worktree of the repository at --cwd.", show_default=False)]
Base = Annotated[Optional[str], typer.Option(help="--worktree: branch each run starts from (default: the one checked out at start).")]
BranchPrefix = Annotated[Optional[str], typer.Option(help="--worktree: run branches are PREFIX<loop>/<run-id> (default loopctl/).")]
Push = Annotated[Optional[str], typer.Option(help="--worktree: push run branches with commits to this remote.")]
Pr = Annotated[Optional[bool], typer.Option("--pr/--no-pr", help="--worktree: open a draft PR with gh after the push.", show_default=False)]
Merge = Annotated[Optional[str], typer.Option(help="--worktree: squash, merge or rebase the PR once its checks pass.")]
ChecksTimeout = Annotated[Optional[str], typer.Option(help="--merge: how long to wait for checks (default 30m).")]
Copy = Annotated[Optional[list[str]], typer.Option(help="--worktree: ignored files to copy into the worktree, like .env (repeatable glob).")]


def workspace_changes(cwd: str, current: dict[str, Any], *, worktree: bool | None,
                      base: str | None, branch_prefix: str | None, push: str | None,
                      pr: bool | None, merge: str | None, checks_timeout: str | None,
                      copy: list[str] | None) -> dict[str, Any]:
    """--worktree and its hand-off options as loops.yaml keys; checked with
    git itself (a repository at --cwd, branch names git accepts)."""
    given = {"worktree": worktree, "base": base, "branch_prefix": branch_prefix, "push": push,
             "pr": pr, "merge": merge, "copy": copy,
             "checks_timeout": _duration(checks_timeout, "--checks-timeout")}
    if worktree is False:  # off: its hand-off settings go with it
        return dict.fromkeys(("worktree", "base", "branch_prefix", "push", "pr", "merge",
                              "checks_timeout", "copy"))
    given = {k: v for k, v in given.items() if v is not None}
    merged = {**current, **given}
    if not merged.get("worktree"):
        return given
    from loopctl.integrations import (
        workspace,  # only for --worktree loops: it costs every start 6 ms
    )

    _, branch = workspace.repository(cwd)
    if merged.get("base") is None:
        if branch is None:
            fail(f"--worktree: {cwd} has no branch checked out (detached HEAD); give --base")
        given["base"] = branch
    workspace.check_ref(str(merged.get("base") or given["base"]), "--base")
    if branch_prefix is not None:
        workspace.check_prefix(branch_prefix)
    if merge is not None and merge not in workspace.MERGE_METHODS:
        fail(f"bad --merge {merge!r}: expected one of {', '.join(workspace.MERGE_METHODS)}")
    return given
MaxDelay = Annotated[Optional[str], typer.Option(help="With --every auto: longest delay (default 1h).")]


@app.command()
def start(
    prompt: Annotated[Optional[str], typer.Argument(help="What the agent should do.", show_default=False)] = None,
    name: Annotated[Optional[str], typer.Option(help="Loop name (default: from the prompt).")] = None,
    prompt_file: Annotated[Optional[Path], typer.Option(help="Read the prompt from this file at every run.")] = None,
    agent: Annotated[Optional[str], typer.Option(help=f"Preset: {', '.join(PRESETS)} (default shell).")] = None,
    command: Annotated[Optional[str], typer.Option(help="Custom agent command, split like a shell, run without one.")] = None,
    every: Every = None, cron: Cron = None, tz: Tz = None,
    after: Annotated[Optional[str], typer.Option(help="Delay before the first run.")] = None,
    min_delay: MinDelay = None, max_delay: MaxDelay = None,
    cwd: Annotated[Optional[Path], typer.Option(help="Working directory (default: here).")] = None,
    env: Annotated[Optional[list[str]], typer.Option(help="KEY=VALUE for the agent, or KEY to pass this name from the driver's environment at fire time (repeatable).")] = None,
    timeout: Timeout = None, for_: For = None, max_runs: MaxRuns = None,
    max_failures: MaxFailures = None, no_progress: NoProgress = None,
    budget_usd: Budget = None, until: Until = None, overlap: Overlap = None,
    catch_up: CatchUp = None, on_attention: OnAttention = None, notify: Notify = None,
    worktree: Worktree = None, base: Base = None, branch_prefix: BranchPrefix = None,
    push: Push = None, pr: Pr = None, merge: Merge = None,
    checks_timeout: ChecksTimeout = None, copy: Copy = None,
    raw: Annotated[bool, typer.Option("--raw", help="Send the prompt as written (no envelope).")] = False,
    continue_session: Annotated[bool, typer.Option("--continue-session", help="Resume the previous run's agent session.")] = False,
    keep_runs: KeepRuns = None,
    model: Annotated[Optional[str], typer.Option(help="Model name passed with the preset's model flag.")] = None,
    agent_arg: Annotated[Optional[list[str]], typer.Option(help="Extra argument for the agent (repeatable).")] = None,
    yolo: Annotated[bool, typer.Option("--yolo", help="Ask for the agent's full permission bypass.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Define a loop and schedule its first run."""
    if (prompt is None) == (prompt_file is None):
        fail("give the prompt as an argument or with --prompt-file (one of them)")
    if every is None and cron is None:
        fail("give a schedule: --every DURATION, --every auto, or --cron EXPR")
    if agent is not None and command is not None:
        fail("give --agent or --command, not both")
    if agent is not None and agent not in PRESETS:
        fail(f"unknown agent {agent!r}: expected one of {', '.join(PRESETS)}")
    raw_def: dict[str, Any] = policy_changes(
        timeout=timeout, for_=for_, max_runs=max_runs, max_failures=max_failures,
        no_progress=no_progress, budget_usd=budget_usd, until=until, overlap=overlap,
        catch_up=catch_up, on_attention=on_attention, keep_runs=keep_runs,
        every=every, cron=cron, tz=tz, min_delay=min_delay, max_delay=max_delay,
        notify=notify)
    raw_def = {k: v for k, v in raw_def.items() if v is not None}
    if prompt is not None:
        raw_def["prompt"] = prompt
    else:
        assert prompt_file is not None
        if not prompt_file.is_file():
            fail(f"bad --prompt-file {prompt_file}: no such file")
        raw_def["prompt_file"] = str(prompt_file.expanduser().absolute())
    workdir = (cwd or Path.cwd()).expanduser().absolute()
    if not workdir.is_dir():
        fail(f"bad --cwd {workdir}: not a directory")
    raw_def["cwd"] = str(workdir)
    raw_def.update({k: v for k, v in workspace_changes(
        str(workdir), {}, worktree=worktree, base=base, branch_prefix=branch_prefix,
        push=push, pr=pr, merge=merge, checks_timeout=checks_timeout, copy=copy).items()
        if v is not None})
    if command is not None:
        raw_def["command"] = command
    else:
        raw_def["agent"] = agent or "shell"
    if after is not None:
        raw_def["after"] = _duration(after, "--after")
    if env:
        raw_def["env"] = dict(check_env_pair(pair) for pair in env)
    raw_def.update({k: v for k, v in {
        "raw": raw or None, "continue_session": continue_session or None,
        "model": model, "agent_args": agent_arg or None, "yolo": yolo or None}.items()
        if v is not None})
    result = core.start(store(), raw_def, name)
    if as_json:
        emit(dict(result, version=core.JSON_VERSION))
        return
    print(f"started {result['name']}: {result['schedule']['text']}, "
          f"next run {relative(_ts(result['next_fire']), clock.now())}")
    _warn_missing_agent(agent, command, yolo)


def _warn_missing_agent(agent: str | None, command: str | None, yolo: bool = False) -> None:
    import shlex
    import shutil

    from loopctl.agents.presets import PRESETS as TABLE

    binary = TABLE[agent or "shell"].binary if command is None else shlex.split(command)[0]
    if shutil.which(binary) is None:
        print(f"warning: {binary} is not on PATH; runs will fail until it is installed",
              file=sys.stderr)
    preset = TABLE.get(agent or "shell") if command is None else None
    if preset and preset.warning:
        print(f"warning: {preset.warning}", file=sys.stderr)
    if yolo and agent == "claude" and os.geteuid() == 0:
        print("warning: Claude Code refuses --dangerously-skip-permissions as root",
              file=sys.stderr)


def _ts(text: str | None) -> float | None:
    return parse_iso(text) if text else None


@app.command()
def update(
    name: NameArg,
    every: Every = None, cron: Cron = None, tz: Tz = None,
    min_delay: MinDelay = None, max_delay: MaxDelay = None,
    timeout: Timeout = None, for_: For = None, max_runs: MaxRuns = None,
    max_failures: MaxFailures = None, no_progress: NoProgress = None,
    budget_usd: Budget = None, until: Until = None, overlap: Overlap = None,
    catch_up: CatchUp = None, on_attention: OnAttention = None, keep_runs: KeepRuns = None,
    notify: Notify = None, worktree: Worktree = None, base: Base = None,
    branch_prefix: BranchPrefix = None, push: Push = None, pr: Pr = None,
    merge: Merge = None, checks_timeout: ChecksTimeout = None, copy: Copy = None,
    as_json: JsonOpt = False,
) -> None:
    """Change a loop's policy (limits are absolute; --for counts from the start)."""
    changes = policy_changes(
        timeout=timeout, for_=for_, max_runs=max_runs, max_failures=max_failures,
        no_progress=no_progress, budget_usd=budget_usd, until=until, overlap=overlap,
        catch_up=catch_up, on_attention=on_attention, keep_runs=keep_runs,
        every=every, cron=cron, tz=tz, min_delay=min_delay, max_delay=max_delay,
        notify=notify)
    if any(v is not None for v in (worktree, base, branch_prefix, push, pr, merge,
                                   checks_timeout, copy)):
        current = core.show(store(), name)[name]
        if not isinstance(current, dict):
            fail(f"loop {name!r} is invalid; fix it in loops.yaml first")
        changes.update(workspace_changes(
            os.path.expanduser(str(current.get("cwd") or ".")), current, worktree=worktree,
            base=base, branch_prefix=branch_prefix, push=push, pr=pr, merge=merge,
            checks_timeout=checks_timeout, copy=copy))
    if not changes:
        fail("nothing to change: give at least one option (see `loopctl update --help`)")
    result = core.update(store(), name, changes)
    if as_json:
        emit(dict(result, version=core.JSON_VERSION))
        return
    from loopctl.integrations.notify import mask

    shown = {k: [mask(u) for u in v] if k == "notify" and v else v for k, v in changes.items()}
    print(f"updated {name}: " + ", ".join(f"{k} {'none' if v is None else v}"
                                          for k, v in shown.items()))


@app.command()
def watch(interval: Annotated[float, typer.Option(min=0.5, max=3600, help="Seconds between refreshes.")] = 2.0) -> None:
    """Live view of every loop; q or Ctrl-C quits (not a terminal: one snapshot)."""
    from loopctl.cli import watch as watcher

    raise typer.Exit(watcher.main(store(), interval))


@app.command("ls")
def ls(as_json: JsonOpt = False) -> None:
    """List loops: schedule, status, runs used, next fire, last outcome."""
    if as_json:
        emit({"version": core.JSON_VERSION, "loops": core.list_loops(store())})
        return
    loops = core.list_brief(store())
    if not loops:
        print("no loops yet. Try:  loopctl start --every 10m --name hello 'echo hello'")
        return
    now = clock.now()
    rows, styles = [], []
    for loop in loops:
        status = loop["status"] + (f" ({loop['reason']})" if loop.get("reason") else "")
        if loop["status"] == "invalid":
            rows.append([loop["name"], "-", status, "-", "-", loop["error"]])
        else:
            rows.append([
                loop["name"], loop["schedule"], status,
                f"{loop['used']}/{loop['limit'] or '∞'}",
                relative(loop["next_fire"], now), loop["last_outcome"] or "-",
            ])
        styles.append(STATUS_STYLE.get(loop["status"]))
    print(table(["NAME", "SCHEDULE", "STATUS", "RUNS", "NEXT", "LAST"], rows, styles))


app.command("list", help="List loops (same as ls).")(ls)


@app.command()
def status(name: Annotated[Optional[str], typer.Argument(help="Loop name (default: all).")] = None,
           as_json: JsonOpt = False) -> None:
    """Show where a loop stands (all loops without NAME)."""
    if name is None:
        if as_json:
            emit({"version": core.JSON_VERSION, "loops": core.list_loops(store())})
        else:
            ls(as_json=False)
        return
    info = core.status(store(), name)
    if as_json:
        emit(dict(info, version=core.JSON_VERSION))
        return
    print(render_status(info))


MARKS = {"ok": ("✓", "o"), "failed": ("✗", "x"), "timeout": ("⏱", "T"),
         "killed": ("■", "K"), "lost": ("?", "?"), "deferred": ("↻", "D")}


def unicode_ok() -> bool:
    import locale

    if os.environ.get("NO_COLOR"):
        return False
    encoding = getattr(sys.stdout, "encoding", None) or locale.getpreferredencoding(False)
    return "utf" in encoding.lower()


def outcome_strip(outcomes: list[str]) -> str:
    pick = 0 if unicode_ok() else 1
    return "".join(MARKS.get(o, ("·", "."))[pick] for o in outcomes)


def render_status(info: dict[str, Any]) -> str:
    now = clock.now()
    if info["status"] == "invalid":
        return f"{line(info['name'])}: invalid\n  {line(info['error'])}"
    status = info["status"] + (f" ({info['reason']})" if info.get("reason") else "")
    if info.get("rate_limited_until"):
        until = time.strftime("%H:%M", time.localtime(_ts(info["rate_limited_until"]) or 0))
        status = f"rate_limited until {until}"
    limit = info["runs"]["limit"]
    fail_limit = info["failures"]["limit"]
    cost = info["cost_usd"]
    lines = [
        f"{line(info['name'])}: {paint(line(status), STATUS_STYLE.get(info['status']))}",
        f"  schedule   {info['schedule']['text']}",
        f"  runs       {info['runs']['used']}/{limit if limit else 'unlimited'}",
        f"  failures   {info['failures']['consecutive']} in a row"
        + (f" (pauses at {fail_limit})" if fail_limit else ""),
        f"  cost       ${cost['spent']:.2f}"
        + (f" of ${cost['budget']:.2f}" if cost["budget"] is not None else " (no budget)"),
        f"  deadline   in {format_rough(info['deadline_remaining_s'])} ({info['deadline']})",
        f"  next fire  {relative(_ts(info['next_fire']), now)}",
    ]
    if info.get("current_run"):
        lines.append(f"  running    {info['current_run']['run_id']}")
    if info.get("last_run"):
        last = info["last_run"]
        lines.append(f"  last run   {last['run_id']} {last['outcome']} "
                     f"{ago(_ts(last['ended_at']), now)}")
    if info.get("recent_outcomes"):
        lines.append(f"  recent     {outcome_strip(info['recent_outcomes'])}")
    if info.get("last_decision"):
        d = info["last_decision"]
        lines.append(f"  decision   {d.get('decision')}: {d.get('summary') or ''}".rstrip())
    if info.get("hook_error"):
        lines.append(f"  hook error {info['hook_error']['message']} ({info['hook_error']['at']})")
    if info.get("notify_error"):
        error = info["notify_error"]
        lines.append(f"  notify error {error['message']} ({error['at']})")
    if info.get("last_handoff"):
        lines.append(f"  hand-off   {_handoff_text(info['last_handoff'])}")
    if info.get("note"):
        lines.append(f"  note       {info['note']}")
    # One field, one line: agent summaries and hand-edited text cannot forge
    # a line (the first is already clean, and painted).
    return "\n".join([lines[0], *(line(text) for text in lines[1:])])


@app.command()
def show(name: NameArg, as_json: JsonOpt = False) -> None:
    """Print a loop's definition as it stands in loops.yaml."""
    data = core.show(store(), name)
    if as_json:
        emit({"version": core.JSON_VERSION, "name": name,
              "definition": core.definition_json(data[name])})
        return
    from loopctl.storage.store import dump_yaml_doc

    print(dump_yaml_doc({name: core.masked(data[name])}).split("\n", 1)[1], end="")


@app.command()
def pause(name: NameArg, as_json: JsonOpt = False) -> None:
    """Pause a loop (a run in flight finishes first)."""
    _control(name, "pause", False, as_json)


@app.command()
def resume(name: NameArg, as_json: JsonOpt = False) -> None:
    """Resume a paused loop (refused while a limit is still reached)."""
    _control(name, "resume", False, as_json)


@app.command()
def stop(name: NameArg,
         kill: Annotated[bool, typer.Option("--kill", help="Kill the run in flight now.")] = False,
         as_json: JsonOpt = False) -> None:
    """Stop a loop for good (a run in flight finishes first, unless --kill)."""
    _control(name, "stop", kill, as_json)


def _control(name: str, verb: str, kill: bool, as_json: bool) -> None:
    result = core.control(store(), name, verb, kill=kill)
    if as_json:
        emit(result)
    else:
        print(f"{name}: {result['message']}")


@app.command()
def rm(name: NameArg,
       keep_logs: Annotated[bool, typer.Option("--keep-logs", help="Keep the run logs.")] = False,
       as_json: JsonOpt = False) -> None:
    """Remove a loop's definition, state and (unless --keep-logs) its logs."""
    result = core.remove(store(), name, keep_logs)
    if as_json:
        emit(result)
    else:
        print(f"removed {name}")


@app.command()
def validate(file: Annotated[Optional[Path], typer.Argument(help="File to check (default: loops.yaml).")] = None,
             as_json: JsonOpt = False) -> None:
    """Check a loops.yaml; exit 3 if unreadable, 2 if an entry is invalid."""
    result = core.validate(store(), file)
    if as_json:
        emit(result)
    else:
        for error in result["invalid"].values():
            print(f"invalid: {line(error)}")
        print(f"{result['file']}: {len(result['valid'])} valid, "
              f"{len(result['invalid'])} invalid")
    if result["invalid"]:
        raise typer.Exit(2)


# -- firing -------------------------------------------------------------------------


@app.command()
def run(name: NameArg,
        scheduled: Annotated[bool, typer.Option("--scheduled", help="For external schedulers: fire only if `tick` would (active, within limits, nothing in flight); else say why and exit 0.")] = False,
        force: Annotated[bool, typer.Option("--force", help="Run even a paused or finished loop.")] = False) -> None:
    """Run a loop now, in the foreground; exit code is the run's."""
    from loopctl.cli import direct

    if scheduled and force:
        fail("give --scheduled or --force, not both")
    raise typer.Exit(direct.run(name, "scheduled" if scheduled else "force" if force
                                else "manual"))


@app.command()
def tick(
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the runs; exit 1 if one failed, 124 if one timed out.")] = False,
    as_json: JsonOpt = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors.")] = False,
) -> None:
    """Fire every due loop once and exit (for cron and CI)."""
    from loopctl.cli import direct

    raise typer.Exit(direct.tick(wait, as_json, quiet))


@app.command()
def daemon(quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not log to stderr.")] = False) -> None:
    """Hold the lease and fire loops as they come due, until SIGTERM/SIGINT."""
    from loopctl.engine.daemon import Daemon

    raise typer.Exit(Daemon(store(), quiet=quiet).run())


@app.command()
def logs(name: NameArg,
         run_id: Annotated[Optional[str], typer.Option("--run", help="Run id (default: latest).")] = None,
         follow: Annotated[bool, typer.Option("--follow", "-f", help="Follow a live run until it ends.")] = False) -> None:
    """Print a run's log (the latest by default)."""
    from loopctl.domain.model import check_name
    from loopctl.domain.untrusted import check_run_id
    from loopctl.storage.runs import latest_run_id

    s = store()
    if run_id is not None:
        check_run_id(run_id)
    check_name(name)  # run files exist only under names `start` accepts
    run_id = run_id or latest_run_id(s.paths, name)
    if run_id is None:
        if not s.read_defs().has(name):
            raise LoopctlError(f"no such loop: {name!r} (see `loopctl ls`)", 4)
        fail(f"loop {name!r} has no runs yet", 1)
    path = s.paths.run_log(name, run_id)
    if not path.exists():
        fail(f"no log for run {run_id!r} of {name!r}", 4)
    _print_log(s, name, run_id, path, follow)


def _print_log(s: Store, name: str, run_id: str, path: Path, follow: bool) -> None:
    from loopctl.storage.runs import read_bounded

    out = sys.stdout.buffer
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as handle:
        checked = time.monotonic()
        while True:
            chunk = handle.read(65536)
            if chunk:
                out.write(chunk)
                continue
            out.flush()
            if not follow or read_bounded(s.paths.run_record(name, run_id)) is not None:
                if follow:  # the footer may land after the record check
                    out.write(handle.read())
                return
            if time.monotonic() - checked >= 1.0:
                checked = time.monotonic()
                if not _run_in_flight(s, name, run_id):
                    out.write(handle.read())
                    out.flush()
                    fail(f"run {run_id} of {name} is no longer running and left no record "
                         "(its supervisor died; the next driver records it as lost)", 1)
            time.sleep(0.2)


def _run_in_flight(s: Store, name: str, run_id: str) -> bool:
    """The run is still claimed in state and its supervisor is alive."""
    from loopctl.engine import procs

    try:
        st = s.read_state()["loops"].get(name) or {}
    except LoopctlError:
        return True  # cannot tell: keep following
    run = st.get("run") or {}
    return run.get("run_id") == run_id and procs.alive(run.get("supervisor"))


@app.command()
def history(name: NameArg,
            limit: Annotated[int, typer.Option(min=0, help="Most recent N runs (0 = all).")] = 20,
            as_json: JsonOpt = False) -> None:
    """List a loop's past runs."""
    records = core.history(store(), name, limit)
    if as_json:
        emit({"version": core.JSON_VERSION, "loop": name, "runs": records})
        return
    if not records:
        print(f"{name} has no finished runs yet")
        return
    rows = []
    for r in records:
        duration = r.get("duration_s")
        exit_code = r.get("exit_code")
        rows.append([r["run_id"], (r.get("started_at") or "-").replace("T", " ").rstrip("Z"),
                     format_duration(duration) if duration is not None else "-",
                     r["outcome"], "-" if exit_code is None else str(exit_code),
                     (r.get("decision") or {}).get("decision") or "-"])
    print(table(["RUN", "STARTED (UTC)", "TOOK", "OUTCOME", "EXIT", "DECISION"], rows))
    handed = [r for r in records if r.get("handoff")]
    if handed:
        print()
        for r in handed:
            print(f"{r['run_id']}  {_handoff_text(r)}"[:80])


def _handoff_text(h: dict[str, Any]) -> str:
    """`merged loopctl/w/RUN (3 files, +10 -2) https://...`, or why it failed."""
    parts = [str(h.get("handoff")), str(h.get("branch") or "")]
    if h.get("files_changed") is not None:
        parts.append(f"({h['files_changed']} files, +{h.get('insertions', 0)} "
                     f"-{h.get('deletions', 0)})")
    parts += [str(h[k]) for k in ("pr_url", "handoff_error", "needs_review") if h.get(k)]
    return " ".join(p for p in parts if p)


@app.command()
def decide(
    decision: Annotated[str, typer.Argument(help="continue, complete, fail or block.")],
    summary: Annotated[Optional[str], typer.Option(help="What happened in this run.")] = None,
    evidence: Annotated[Optional[str], typer.Option(help="How you know.")] = None,
    next_: Annotated[Optional[str], typer.Option("--next", help="With continue on auto pace: delay before the next run.")] = None,
) -> None:
    """Report this run's decision (only inside a run started by loopctl)."""
    if decision not in ("continue", "complete", "fail", "block"):
        fail(f"bad decision {decision!r}: expected continue, complete, fail or block")
    delay = parse_duration(next_, "--next") if next_ is not None else None
    core.decide(decision, summary, evidence, delay)
    print(f"decision recorded: {decision}")


@app.command()
def agents(as_json: JsonOpt = False) -> None:
    """List the agent presets: installed?, version, the command each runs."""
    import shlex

    rows = core.agents_table()
    if as_json:
        emit({"version": core.JSON_VERSION, "agents": rows})
        return
    import textwrap

    for row in rows:
        found = row["version"] or ("installed" if row["path"] else "not on PATH")
        command = shlex.join(row["argv"]) + (" < PROMPT" if row["prompt_on_stdin"] else "")
        print(f"{paint(row['preset'], 'bold')}  ({found}; decisions: {row['verified']})")
        print(textwrap.fill(command, width=78, initial_indent="    ",
                            subsequent_indent="      ", break_on_hyphens=False,
                            break_long_words=False))


@app.command()
def doctor(as_json: JsonOpt = False,
           notify: Annotated[Optional[list[str]], typer.Option(help="Apprise URL, or a name from notify_targets: in loops.yaml, told when unhealthy, silent when healthy: a dead-man's switch for cron (repeatable).")] = None) -> None:
    """Check files, lease, overdue and expiring loops, agents, hooks; exit 1 if unwell."""
    s = store()
    report = core.doctor(s)
    if notify and not report["healthy"]:
        problems = [f"{f['check']}: {f['message']}" for f in report["findings"]
                    if f["level"] == "error"]
        report["notified"] = core.send_notification(
            core.resolve_targets(s, notify),
            f"loopctl: {len(problems)} problem(s) on {os.uname().nodename}",
            "\n".join(problems), s.paths.state_dir)
        _print_delivery(report["notified"], to_stderr=as_json)
    if as_json:
        emit(report)
    else:
        marks = {"ok": "ok  ", "warn": "WARN", "error": "FAIL"}
        styles = {"ok": "green", "warn": "yellow", "error": "red"}
        for finding in report["findings"]:
            print(f"{paint(marks[finding['level']], styles[finding['level']])} "
                  + line(f"{finding['check']}: {finding['message']}"))
        print("healthy" if report["healthy"] else "needs attention")
    raise typer.Exit(0 if report["healthy"] else 1)


def _print_delivery(results: list[dict[str, Any]], to_stderr: bool = False) -> None:
    for r in results:
        print(line(f"notify {r['target']}: {'sent' if r['ok'] else 'FAILED: ' + str(r['error'])}"),
              file=sys.stderr if to_stderr else sys.stdout)


@app.command()
def digest(since: Annotated[str, typer.Option(help="How far back, like 24h or 7d.")] = "24h",
           as_json: JsonOpt = False,
           notify: Annotated[Optional[list[str]], typer.Option(help="Also send the digest to this Apprise URL, or a name from notify_targets: in loops.yaml (repeatable).")] = None) -> None:
    """What happened since a time: needs you, runs, decisions, cost, events."""
    from loopctl.domain import digest as report

    s = store()
    result = core.digest(s, parse_duration(since, "--since"))
    text = report.render(result)
    if notify:
        result["notified"] = core.send_notification(core.resolve_targets(s, notify),
                                                    "loopctl digest", text, s.paths.state_dir)
    if as_json:
        emit(result)
    else:
        print(text, end="")
    if notify:
        _print_delivery(result["notified"], to_stderr=as_json)
        if not all(r["ok"] for r in result["notified"]):
            raise typer.Exit(1)


notify_app = typer.Typer(help="Notification targets (Apprise URLs).", no_args_is_help=True)
app.add_typer(notify_app, name="notify")


@notify_app.command("test")
def notify_test(url: Annotated[Optional[str], typer.Argument(help="An Apprise URL or a name from notify_targets: (default: the loop's, or every loop's, targets).")] = None,
                loop: Annotated[Optional[str], typer.Option("--loop", help="Test this loop's targets.")] = None,
                as_json: JsonOpt = False) -> None:
    """Send a test message and report each target's result; exit 1 if one failed."""
    s = store()
    urls = core.resolve_targets(s, [url]) if url else core.notify_targets(s, loop)
    if not urls:
        fail("no notification targets: give a URL, or set one with "
             "`loopctl update NAME --notify URL`")
    results = core.send_notification(urls, "loopctl: test notification",
                                     f"This is a test from loopctl on {os.uname().nodename}.",
                                     s.paths.state_dir)
    if as_json:
        emit({"version": core.JSON_VERSION, "results": results})
    else:
        _print_delivery(results)
    raise typer.Exit(0 if all(r["ok"] for r in results) else 1)


@app.command()
def events(name: Annotated[Optional[str], typer.Argument(help="Only this loop's events.")] = None,
           follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events.")] = False,
           as_json: JsonOpt = False) -> None:
    """Show attention events (completed, failed, paused by a limit, expired)."""
    s = store()
    seen = 0
    while True:
        found = core.read_events(s, name)
        for event in found[seen:]:
            if as_json:
                print(json.dumps(event, sort_keys=True, allow_nan=False), flush=True)
            else:
                reason = f" ({event['reason']})" if event.get("reason") else ""
                print(line(f"{event.get('observed_at')}  {event.get('loop')}: "
                           f"{event.get('status')}{reason}: {event.get('summary')}"), flush=True)
        seen = len(found)
        if not follow:
            if not found and not as_json:
                print("no attention events yet")
            return
        time.sleep(0.5)


cron_app = typer.Typer(help="Install, remove or check the crontab line that runs `loopctl tick`.",
                       no_args_is_help=True, rich_markup_mode=None)
app.add_typer(cron_app, name="cron")


@cron_app.command("install")
def cron_install(as_json: JsonOpt = False) -> None:
    """Add the every-minute `loopctl tick` line to your crontab (idempotent)."""
    from loopctl.integrations import crontab

    result = crontab.install(store())
    if as_json:
        emit(result)
        return
    print(("installed: " if result["changed"] else "already installed: ") + result["line"])
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
        print(f"tick log:     {result['log']}")


@app.command("export")
def export_cmd(
    name: NameArg,
    to: Annotated[str, typer.Option("--to", help="crontab, systemd, k8s or github.")],
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the files into this directory (default: print them).")] = None,
    image: Annotated[Optional[str], typer.Option(help="k8s: container image with Python, loopctl and the agent CLI (required).")] = None,
    install: Annotated[Optional[str], typer.Option(help="github: pinned pip requirement for loopctl (default: how this copy was installed).")] = None,
    state_size: Annotated[str, typer.Option(help="k8s: size of the state volume claim.")] = "1Gi",
    secrets_file: Annotated[Optional[Path], typer.Option(help="k8s: also write the secret's KEY=VALUE env file here (0600).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Hand a loop to crontab, systemd, Kubernetes or GitHub Actions."""
    from loopctl.integrations import export as exporter

    s = store()
    defs = s.read_defs()
    if not defs.has(name):
        raise LoopctlError(f"no such loop: {name!r} (see `loopctl ls`)", 4)
    loop = defs.loops.get(name)
    if loop is None:
        fail(f"loop {name!r} is invalid ({defs.invalid.get(name)}); fix it first")
    _check_quantity(state_size)
    prompt_text = None
    if loop.prompt_file:
        try:
            # Bytes, then text: read_text() would turn CRLF into LF.
            prompt_text = Path(loop.cwd, loop.prompt_file).expanduser().read_bytes().decode()
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"cannot read prompt file {loop.prompt_file}: "
                 f"{getattr(exc, 'strerror', None) or 'not UTF-8 text'}")
    target = exporter.Target(
        to, home=str(s.paths.config_dir) if os.environ.get("LOOPCTL_HOME") else None,
        state_dir=str(s.paths.state_dir), image=image, state_size=state_size,
        install=install, prompt_text=prompt_text)
    result = exporter.export(loop, target)
    if secrets_file is not None:
        if to != "k8s":
            fail("--secrets-file is for --to k8s (crontab and systemd read the local store; "
                 "on GitHub use `gh secret set`)")
        _write_secrets_file(loop, secrets_file, result)
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if output is not None:
        from loopctl.storage.paths import ensure_dir
        from loopctl.storage.store import atomic_write

        ensure_dir(output)
        for filename, text in result.files.items():
            atomic_write(output / filename, text.encode())
            if not as_json:
                print(f"wrote {output / filename}")
    if as_json:
        print(exporter.as_json(result))
        return
    if output is None:
        for filename, text in result.files.items():
            if len(result.files) > 1:
                print(f"# --- {filename}")
            print(text, end="")
    for step in result.next_steps:
        print(f"next: {step}", file=sys.stderr)


def _check_quantity(size: str) -> None:
    import re

    if not re.fullmatch(r"[1-9][0-9]{0,5}(Ki|Mi|Gi|Ti)", size):
        fail(f"bad --state-size {size!r}: expected a size like 512Mi or 1Gi")


def _write_secrets_file(loop: Any, path: Path, result: Any) -> None:
    """Values for `kubectl create secret ... --from-env-file`; written 0600
    and never into an exported file."""
    from loopctl.integrations import export as exporter
    from loopctl.storage.store import atomic_write

    text, missing = exporter.secrets_env_file(loop, dict(os.environ))
    atomic_write(path.expanduser().absolute(), text.encode())
    if missing:
        result.warnings.append(f"{path} lacks {', '.join(missing)}: set them in this "
                               "environment (or with --env KEY=VALUE) and export again")


# -- running the app --------------------------------------------------------------


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


def run_app(args: list[str]) -> NoReturn:
    """Run the CLI with one-line errors and the documented exit codes."""
    # Typer 0.29 vendors click as typer._click; its exceptions are only
    # reachable there (typer.Exit and typer.Abort are its own classes).
    from typer._click import exceptions as cx

    command = typer.main.get_command(_narrowed(args))
    try:
        code = command.main(args, prog_name="loopctl", standalone_mode=False)
    except typer.Exit as exc:
        code = exc.exit_code
    except typer.Abort:
        print("loopctl: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    except cx.NoArgsIsHelpError as exc:
        print(exc.ctx.get_help() if exc.ctx else "", file=sys.stderr)
        code = 2
    except cx.UsageError as exc:
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx else ""
        print(f"loopctl: error: {exc.format_message()}{hint}", file=sys.stderr)
        code = 2
    except cx.ClickException as exc:
        print(f"loopctl: error: {exc.format_message()}", file=sys.stderr)
        code = exc.exit_code
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - one line, not a traceback
        code = report(exc)
    sys.exit(code if isinstance(code, int) else 0)
