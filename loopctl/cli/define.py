"""`start` and `update`: the options that define a loop, checked before any file
is touched.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from loopctl import clock
from loopctl.cli.bounds_opts import warn_bounds
from loopctl.cli.budget_warn import warn_uncounted_budget
from loopctl.cli.check_opts import check_changes
from loopctl.cli.fallback_opts import fallback_changes
from loopctl.cli.feedback_opts import feedback_changes
from loopctl.cli.gate_opts import gate_changes
from loopctl.cli.github_opts import github_changes
from loopctl.cli.objective_opts import NewObjective, objective_changes
from loopctl.cli.options import JsonOpt, NameArg, emit, fail, store, ts
from loopctl.cli.render import relative
from loopctl.cli.sandbox_opts import sandbox_changes
from loopctl.cli.setting_opts import own_changes, pick, with_settings
from loopctl.cli.worktree_opts import workspace_changes
from loopctl.commands import define as defining
from loopctl.commands import views as reading
from loopctl.domain.checks import check_env_pair
from loopctl.domain.loop_settings import BY_KEY
from loopctl.domain.model import PRESETS

if TYPE_CHECKING:
    from loopctl.commands.loop_view import LoopObject


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


def policy_changes(*, every: str | None, cron: str | None, tz: str | None,
                   on_attention: str | None, notify: list[str] | None) -> dict[str, Any]:
    """The schedule, the hook and the notification targets, as loops.yaml
    keys (None: the key removed; absent: not given)."""
    clear = object()  # `--on-attention none` removes the hook
    hook = _hook(on_attention, clear)
    given = {"on_attention": hook, "every": every, "cron": cron, "tz": tz}
    if notify:
        from loopctl.integrations.notify import check_urls

        # `--notify none` clears the list (with others: they replace it).
        given["notify"] = check_urls(_named_targets(notify)) or clear
    # None in the result means "remove this key" (defining.update).
    return {k: None if v is clear else v for k, v in given.items() if v is not None}


def _policy(settings: dict[str, Any], command: str) -> dict[str, Any]:
    """The rows' own options (each by its parser) and the policy group's."""
    return {**own_changes(settings, command), **policy_changes(**pick(settings, "policy"))}


@with_settings("start")
def start(
    prompt: Annotated[Optional[str], typer.Argument(help="What the agent should do (a --command loop may go without).", show_default=False)] = None,
    name: Annotated[Optional[str], typer.Option(help="Loop name (default: from the prompt).")] = None,
    as_json: JsonOpt = False,
    **settings: Any,
) -> None:
    """Define a loop and schedule its first run."""
    prompt_file, agent = settings["prompt_file"], settings["agent"]
    command, cwd = settings["command"], settings["cwd"]
    if prompt is not None and prompt_file is not None:
        fail("give the prompt as an argument or with --prompt-file, not both")
    if prompt is None and prompt_file is None and command is None:
        fail("give the prompt as an argument or with --prompt-file (only a --command "
             "loop may go without one)")
    after, yolo = settings["after"], bool(settings["yolo"])
    _check_schedule_given(settings["every"], settings["cron"], settings["on_demand"])
    if agent is not None and agent not in PRESETS:
        fail(f"unknown agent {agent!r}: expected one of {', '.join(PRESETS)}")
    raw_def: dict[str, Any] = {k: v for k, v in _policy(settings, "start").items()
                               if v is not None}
    workdir = _objective(raw_def, prompt, prompt_file, cwd)
    raw_def.update({k: v for k, v in workspace_changes(
        str(workdir), {}, **pick(settings, "worktree")).items() if v is not None})
    raw_def.update(_agent_fields(command, agent, after, settings["env"]))
    raw_def.update({k: v for k, v in _group_changes(settings, clearing=False).items()
                    if v is not None})
    result = defining.start(store(), raw_def, name)
    warn_bounds(raw_def)
    warn_uncounted_budget(store().read_defs().loops.get(result.name))
    if as_json:
        emit(result.to_json())
        return
    _say_started(result)
    _warn_after_start(raw_def, agent, command, yolo)


def _group_changes(settings: dict[str, Any], clearing: bool) -> dict[str, Any]:
    """The groups other than the worktree's (which needs the loop's
    directory) as loops.yaml keys; `clearing`: `update`, where `none`
    removes a key."""
    return {**sandbox_changes(**pick(settings, "sandbox")),
            **gate_changes(**pick(settings, "gate")),
            **check_changes(**pick(settings, "check")),
            **feedback_changes(**pick(settings, "feedback")),
            **fallback_changes(**pick(settings, "fallback"), clearing=clearing),
            **github_changes(**pick(settings, "github"))}


def _agent_fields(command: str | None, agent: str | None, after: str | None,
                  env: list[str] | None) -> dict[str, Any]:
    """What runs, when first, with which environment, as loops.yaml keys."""
    # Both given: parse_loop's rule between the rows refuses them.
    out: dict[str, Any] = {"agent": agent or "shell"} if command is None \
        else {"command": command, **({"agent": agent} if agent is not None else {})}
    if after is not None:
        out["after"] = after
    if env:
        out["env"] = dict(check_env_pair(pair) for pair in env)
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


def _check_schedule_given(every: str | None, cron: str | None, on_demand: bool) -> None:
    """A new loop's schedule, said as the options that give one (the rules
    between them are the rows', checked by parse_loop)."""
    if every is None and cron is None and not on_demand:
        fail("give a schedule: --every DURATION, --every auto, --cron EXPR, or --on-demand")


def _say_started(result: LoopObject) -> None:
    name = result.name
    if result.schedule.get("on_demand"):
        print(f"started {name}: on demand; fire it with `loopctl trigger {name}`")
    else:
        print(f"started {name}: {result.schedule['text']}, "
              f"next run {relative(ts(result.next_fire), clock.now())}")


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
    raw = reading.show(s, name).definition
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


# `update` says what it changed in the order loops.yaml is written.
_TABLE_ORDER = {key: index for index, key in enumerate(BY_KEY)}


@with_settings("update")
def update(
    name: NameArg,
    new_objective: NewObjective = False,
    as_json: JsonOpt = False,
    **settings: Any,
) -> None:
    """Change a loop's policy (limits are absolute; --for counts from the start)."""
    objective = objective_changes(name, settings["prompt"], settings["prompt_file"],
                                  new_objective)
    changes = _policy(settings, "update")
    worktree_given = pick(settings, "worktree")
    if any(v is not None for v in worktree_given.values()):
        current = reading.show(store(), name).definition
        if not isinstance(current, dict):
            fail(f"loop {name!r} is invalid; fix it in loops.yaml first")
        changes.update(workspace_changes(
            os.path.expanduser(str(current.get("cwd") or ".")), current, **worktree_given))
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
        emit(result.to_json())
        return
    _say_updated(name, changes)
    if result.status in ("stopped", "completed", "failed", "expired"):
        print(f"note: {name} is {result.status} and stays so; to run it again: "
              f"`loopctl rm {name}`, then `loopctl start --name {name} ...`", file=sys.stderr)


def _say_updated(name: str, changes: dict[str, Any]) -> None:
    """`updated NAME: timeout 1h30m, ...`: each duration and size as
    loops.yaml now holds it (the one parse wrote it), not as typed."""
    from loopctl.domain.reason import one_line
    from loopctl.domain.untrusted import mask

    changes = {**changes, **_as_written(name, changes)}
    shown = {k: [mask(u) for u in v] if k == "notify" and v else v
             for k, v in sorted(changes.items(), key=lambda kv: _TABLE_ORDER.get(kv[0], 0))}
    for key in ("prompt", "prompt_file"):  # the one given, not the one it clears
        if key in shown and shown[key] is None:
            del shown[key]
    if shown.get("prompt"):
        shown["prompt"] = repr(one_line(str(shown["prompt"]), 60))
    print(f"updated {name}: " + ", ".join(f"{k} {'none' if v is None else v}"
                                          for k, v in shown.items()))


def _as_written(name: str, changes: dict[str, Any]) -> dict[str, Any]:
    keys = [k for k, v in changes.items()
            if v is not None and k in BY_KEY and BY_KEY[k].kind in ("duration", "size")]
    if not keys:
        return {}
    definition = reading.show(store(), name).definition
    if not isinstance(definition, dict):
        return {}
    return {k: definition[k] for k in keys if k in definition}
