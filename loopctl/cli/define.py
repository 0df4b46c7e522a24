"""`start` and `update`: the options that define a loop, checked before any file
is touched.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from loopctl import clock
from loopctl.cli.bounds_opts import BOUNDS, bounds_changes, warn_bounds
from loopctl.cli.budget_warn import warn_uncounted_budget
from loopctl.cli.check_opts import CHECK_OPTS, check_changes
from loopctl.cli.fallback_opts import FALLBACK_OPTS, fallback_changes
from loopctl.cli.feedback_opts import FEEDBACK_OPTS, feedback_changes
from loopctl.cli.gate_opts import GATE_OPTS, gate_changes
from loopctl.cli.github_opts import GITHUB_OPTS, github_changes
from loopctl.cli.objective_opts import NewObjective, NewPrompt, NewPromptFile, objective_changes
from loopctl.cli.options import JsonOpt, NameArg, duration, emit, fail, store, ts
from loopctl.cli.render import relative
from loopctl.cli.sandbox_opts import SANDBOX_OPTS, sandbox_changes
from loopctl.cli.setting_opts import given as given_setting
from loopctl.cli.setting_opts import pick, with_settings
from loopctl.cli.worktree_opts import WORKTREE_OPTS, workspace_changes
from loopctl.commands import common
from loopctl.commands import define as defining
from loopctl.commands import views as reading
from loopctl.domain.checks import check_env_pair
from loopctl.domain.loop_settings import BY_KEY
from loopctl.domain.model import PRESETS


def _check_schedule(every: str | None, cron: str | None, tz: str | None) -> None:
    """Each error names the option given, not the loop it would become."""
    from loopctl.domain.checks import check_cron, check_tz

    if every is not None and cron is not None:
        fail("give --every or --cron, not both")
    if tz is not None and cron is None:
        fail("--tz only applies to --cron schedules")
    if every is not None and every != "auto":
        duration(every, "--every")
    if cron is not None:
        check_cron(cron, "--cron")
    if tz is not None:
        check_tz(tz, "--tz")


def _hook(on_attention: str | None, clear: object) -> object:
    """`--on-attention PATH` as stored (absolute), `clear` for 'none'; an
    executable file now, not a failure at the first attention event."""
    if on_attention is None or on_attention == "none":
        return clear if on_attention == "none" else None
    if not on_attention.strip():
        fail("bad --on-attention '': expected the path of an executable, "
             "or 'none' to remove the hook")
    path = str(Path(on_attention).expanduser().absolute())
    if not os.path.isfile(path):
        fail(f"bad --on-attention {on_attention!r}: no such file ({path})")
    if not os.access(path, os.X_OK):
        fail(f"bad --on-attention {on_attention!r}: {path} is not executable; "
             f"`chmod +x {path}`")
    return path


def policy_changes(*, timeout: str | None, for_: str | None, max_runs: int | None,
                   max_failures: int | None, no_progress: int | None,
                   budget_usd: float | None, until: str | None, overlap: str | None,
                   catch_up: str | None, on_attention: str | None, keep_runs: int | None,
                   every: str | None = None, cron: str | None = None,
                   tz: str | None = None, min_delay: str | None = None,
                   max_delay: str | None = None,
                   notify: list[str] | None = None,
                   max_deferrals: int | None = None,
                   catch_up_window: str | None = None) -> dict[str, Any]:
    """Options given on the command line, as loops.yaml keys (None: not given)."""
    given_setting("overlap", overlap), given_setting("catch_up", catch_up)  # the rows' rule
    _check_schedule(every, cron, tz)
    clear = object()  # `--on-attention none` removes the hook
    hook = _hook(on_attention, clear)
    given = {
        "timeout": duration(timeout, "--timeout"), "for": duration(for_, "--for"),
        "max_runs": max_runs, "max_failures": max_failures, "no_progress": no_progress,
        "max_deferrals": max_deferrals,
        "budget_usd": budget_usd, "until": until, "overlap": overlap,
        "catch_up": catch_up, "on_attention": hook, "keep_runs": keep_runs,
        "every": every, "cron": cron, "tz": tz,
        "min_delay": duration(min_delay, "--min-delay"),
        "max_delay": duration(max_delay, "--max-delay"),
        "catch_up_window": clear if catch_up_window == "none"
        else duration(catch_up_window, "--catch-up-window"),
    }
    if notify:
        from loopctl.integrations.notify import check_urls

        # `--notify none` clears the list (with others: they replace it).
        given["notify"] = check_urls(_named_targets(notify)) or clear
    # None in the result means "remove this key" (defining.update).
    return {k: None if v is clear else v for k, v in given.items() if v is not None}


# The settings whose options come from the table as they are (no
# translator of their own beyond `policy_changes` and `bounds_changes`).
POLICY = ("every", "cron", "tz", "min_delay", "max_delay", "timeout", "for", "max_runs",
          "max_failures", "max_deferrals", "no_progress", "budget_usd", "until", "overlap",
          "catch_up", "catch_up_window", "on_attention", "keep_runs", "notify")


def _policy(settings: dict[str, Any]) -> dict[str, Any]:
    return policy_changes(**{BY_KEY[k].python: settings[BY_KEY[k].python] for k in POLICY})


# What the agent is given, as `start` options from the table.
START_FLAGS = ("raw", "continue_session", "model", "agent_args", "yolo")


# The option groups with a translator of their own, in the order `--help`
# lists them.
GROUPS = (WORKTREE_OPTS, GATE_OPTS, CHECK_OPTS, FEEDBACK_OPTS, FALLBACK_OPTS, GITHUB_OPTS,
          SANDBOX_OPTS)


@with_settings(*POLICY, *BOUNDS, "after", "env", *START_FLAGS, groups=GROUPS)
def start(
    prompt: Annotated[Optional[str], typer.Argument(help="What the agent should do (a --command loop may go without).", show_default=False)] = None,
    name: Annotated[Optional[str], typer.Option(help="Loop name (default: from the prompt).")] = None,
    prompt_file: Annotated[Optional[Path], typer.Option(help="Read the prompt from this file at every run.")] = None,
    agent: Annotated[Optional[str], typer.Option(help=f"Preset: {', '.join(PRESETS)} (default shell).")] = None,
    command: Annotated[Optional[str], typer.Option(help="Custom agent command, split like a shell, run without one.")] = None,
    cwd: Annotated[Optional[Path], typer.Option(help="Working directory (default: here).")] = None,
    as_json: JsonOpt = False,
    **settings: Any,
) -> None:
    """Define a loop and schedule its first run."""
    if prompt is not None and prompt_file is not None:
        fail("give the prompt as an argument or with --prompt-file, not both")
    if prompt is None and prompt_file is None and command is None:
        fail("give the prompt as an argument or with --prompt-file (only a --command "
             "loop may go without one)")
    after, yolo = settings["after"], bool(settings["yolo"])
    _check_schedule_given(settings["every"], settings["cron"], after, settings["on_demand"])
    if agent is not None and command is not None:
        fail("give --agent or --command, not both")
    if agent is not None and agent not in PRESETS:
        fail(f"unknown agent {agent!r}: expected one of {', '.join(PRESETS)}")
    raw_def: dict[str, Any] = {k: v for k, v in _policy(settings).items() if v is not None}
    workdir = _objective(raw_def, prompt, prompt_file, cwd)
    raw_def.update({k: v for k, v in workspace_changes(
        str(workdir), {}, **pick(settings, WORKTREE_OPTS)).items() if v is not None})
    raw_def.update(_agent_fields(command, agent, after, settings["env"], {
        s.key: settings[s.python] or None for s in map(BY_KEY.get, START_FLAGS) if s}))
    raw_def.update({k: v for k, v in {
        **bounds_changes(**{k: settings[k] for k in BOUNDS}),
        **_group_changes(settings, clearing=False),
    }.items() if v is not None})
    result = defining.start(store(), raw_def, name)
    warn_bounds(raw_def)
    warn_uncounted_budget(store().read_defs().loops.get(result["name"]))
    if as_json:
        emit(dict(result, version=common.JSON_VERSION))
        return
    _say_started(result)
    _warn_after_start(raw_def, agent, command, yolo)


def _group_changes(settings: dict[str, Any], clearing: bool) -> dict[str, Any]:
    """The groups other than the worktree's (which needs the loop's
    directory) as loops.yaml keys; `clearing`: `update`, where `none`
    removes a key."""
    return {**sandbox_changes(**pick(settings, SANDBOX_OPTS)),
            **gate_changes(**pick(settings, GATE_OPTS)),
            **check_changes(**pick(settings, CHECK_OPTS)),
            **feedback_changes(**pick(settings, FEEDBACK_OPTS)),
            **fallback_changes(**pick(settings, FALLBACK_OPTS), clearing=clearing),
            **github_changes(**pick(settings, GITHUB_OPTS))}


def _agent_fields(command: str | None, agent: str | None, after: str | None,
                  env: list[str] | None, flags: dict[str, Any]) -> dict[str, Any]:
    """What runs, when first, with which environment, as loops.yaml keys."""
    out: dict[str, Any] = {"command": command} if command is not None \
        else {"agent": agent or "shell"}
    if after is not None:
        out["after"] = duration(after, "--after")
    if env:
        out["env"] = dict(check_env_pair(pair) for pair in env)
    out.update({k: v for k, v in flags.items() if v is not None})
    return out


def _warn_after_start(raw_def: dict[str, Any], agent: str | None, command: str | None,
                      yolo: bool) -> None:
    _warn_missing_agent(agent, command, yolo)
    _warn_missing_programs(raw_def)
    _warn_unset_env(raw_def.get("env") or {})
    from loopctl.cli import sandbox_opts

    sandbox_opts.warn(raw_def, store().read_defs().top.get("sandbox"))


def _named_targets(values: list[str]) -> list[str]:
    """`--notify NAME`: a word without `://` is a name from `notify_targets:`,
    stored as the URLs it names; an unknown name is exit 2 naming the known."""
    from loopctl.domain.names import is_loop_name
    from loopctl.integrations.notify import resolve

    # Only what a name may be is one: other text goes to Apprise's check,
    # which shows it masked (it may be a mistyped URL with its token).
    def named(value: str) -> bool:
        return value != "none" and is_loop_name(value)

    if not any(map(named, values)):
        return values
    table = store().read_defs().top.get("notify_targets")  # read once for every name
    return [url for v in values for url in (resolve([v], table) if named(v) else [v])]


def _check_schedule_given(every: str | None, cron: str | None, after: str | None,
                          on_demand: bool) -> None:
    if every is None and cron is None and not on_demand:
        fail("give a schedule: --every DURATION, --every auto, --cron EXPR, or --on-demand")
    if on_demand and (every is not None or cron is not None or after is not None):
        fail("--on-demand loops have no time schedule: drop --every, --cron and --after")


def _say_started(result: dict[str, Any]) -> None:
    name = result["name"]
    if result["schedule"].get("on_demand"):
        print(f"started {name}: on demand; fire it with `loopctl trigger {name}`")
    else:
        print(f"started {name}: {result['schedule']['text']}, "
              f"next run {relative(ts(result['next_fire']), clock.now())}")


def _objective(raw_def: dict[str, Any], prompt: str | None, prompt_file: Path | None,
               cwd: Path | None) -> Path:
    """The prompt (or its file) and the working directory, into `raw_def`."""
    if prompt is not None:
        raw_def["prompt"] = prompt
    elif prompt_file is not None:
        if not prompt_file.is_file():
            fail(f"bad --prompt-file {prompt_file}: no such file")
        raw_def["prompt_file"] = str(prompt_file.expanduser().absolute())
    workdir = (cwd or Path.cwd()).expanduser().absolute()
    if not workdir.is_dir():
        fail(f"bad --cwd {workdir}: not a directory")
    raw_def["cwd"] = str(workdir)
    return workdir


def _warn_unset_env(env: dict[str, str | None]) -> None:
    """`--env KEY` passes KEY from the driver's environment at fire time: if
    this shell lacks it, a cron or daemon driver most likely does too."""
    for key in sorted(k for k, v in env.items() if v is None and k not in os.environ):
        print(f"warning: --env {key}: {key} is not set here; runs get it only if the "
              f"driver's environment has it (or give --env {key}=VALUE)", file=sys.stderr)


def _warn_missing_programs(raw_def: dict[str, Any]) -> None:
    """A check or gate whose program is not on PATH fails every run (a
    check that never passes refuses every `complete`): say so now, as for
    the agent. Only bare names under this PATH are looked up."""
    from loopctl.commands.doctor import unfound_programs
    from loopctl.domain.checks import split_command
    from loopctl.domain.untrusted import line

    commands = [(split_command(raw_def[key], key, key=key, placeholders=False), what)
                for key, what in (("check", "the check"), ("if", "the gate"))
                if raw_def.get(key) is not None]
    for program, what in unfound_programs(raw_def.get("env") or {}, commands):
        print(f"warning: {line(program)[:100]} ({what}) is not on PATH; {what} will fail "
              "at every run until it is installed", file=sys.stderr)


def _warn_agent_command(name: str) -> None:
    """After `update --sandbox`: a `--command` agent CLI left under auto."""
    from loopctl.cli import sandbox_opts
    from loopctl.domain.confinement import mode_for

    s = store()
    raw = reading.show(s, name).get(name)
    if isinstance(raw, dict):
        top = s.read_defs().top.get("sandbox")
        sandbox_opts.warn_agent_command(raw, mode_for(raw.get("sandbox"), top))


def _warn_missing_agent(agent: str | None, command: str | None, yolo: bool = False) -> None:
    import shlex
    import shutil

    from loopctl.agents.presets import PRESETS as TABLE

    binary = TABLE[agent or "shell"].binary if command is None else shlex.split(command)[0]
    if shutil.which(binary) is None:
        from loopctl.agents.presets import install_hint

        hint = install_hint(agent) if command is None else ""
        print(f"warning: {binary} is not on PATH; runs will fail until it is installed{hint}",
              file=sys.stderr)
    preset = TABLE.get(agent or "shell") if command is None else None
    if preset and preset.warning:
        print(f"warning: {preset.warning}", file=sys.stderr)
    if yolo and agent == "claude" and os.geteuid() == 0:
        print("warning: Claude Code refuses --dangerously-skip-permissions as root",
              file=sys.stderr)


@with_settings(*POLICY, *BOUNDS, groups=GROUPS)
def update(
    name: NameArg,
    prompt: NewPrompt = None, prompt_file: NewPromptFile = None,
    new_objective: NewObjective = False,
    as_json: JsonOpt = False,
    **settings: Any,
) -> None:
    """Change a loop's policy (limits are absolute; --for counts from the start)."""
    objective = objective_changes(name, prompt, prompt_file, new_objective)
    changes = _policy(settings)
    worktree_given = pick(settings, WORKTREE_OPTS)
    if any(v is not None for v in worktree_given.values()):
        current = reading.show(store(), name)[name]
        if not isinstance(current, dict):
            fail(f"loop {name!r} is invalid; fix it in loops.yaml first")
        changes.update(workspace_changes(
            os.path.expanduser(str(current.get("cwd") or ".")), current, **worktree_given))
    changes.update(bounds_changes(**{k: settings[k] for k in BOUNDS}))
    if settings["on_demand"] and (settings["every"] is not None or settings["cron"] is not None):
        fail("give --on-demand or a schedule (--every, --cron), not both")
    changes.update(_group_changes(settings, clearing=True))
    changes.update(objective)
    if not changes:
        fail("nothing to change: give at least one option (see `loopctl update --help`)")
    result = defining.update(store(), name, changes)
    warn_bounds(changes)
    if changes.get("budget_usd") is not None or {"agent", "command"} & set(changes):
        warn_uncounted_budget(store().read_defs().loops.get(name))
    _warn_missing_programs(changes)
    if "sandbox" in changes:
        _warn_agent_command(name)
    if as_json:
        emit(dict(result, version=common.JSON_VERSION))
        return
    from loopctl.domain.reason import one_line
    from loopctl.domain.untrusted import mask

    shown = {k: [mask(u) for u in v] if k == "notify" and v else v for k, v in changes.items()}
    for key in ("prompt", "prompt_file"):  # the one given, not the one it clears
        if key in shown and shown[key] is None:
            del shown[key]
    if shown.get("prompt"):
        shown["prompt"] = repr(one_line(str(shown["prompt"]), 60))
    print(f"updated {name}: " + ", ".join(f"{k} {'none' if v is None else v}"
                                          for k, v in shown.items()))
    if result["status"] in ("stopped", "completed", "failed", "expired"):
        print(f"note: {name} is {result['status']} and stays so; to run it again: "
              f"`loopctl rm {name}`, then `loopctl start --name {name} ...`", file=sys.stderr)
