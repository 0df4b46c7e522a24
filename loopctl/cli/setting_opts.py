"""Every `start`/`update` option of a loop setting, made from its row of the
settings table (domain/loop_settings.py): the flag, its help, metavar, type,
range and default. A row's `group` names the translator in `cli/*_opts.py`
that turns its group's options into keys together; a row without one is
mapped by `given`. None of them parses a value: `model.parse_loop` reads
each once, naming it by its option (domain/setting_rules.py)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional, TypeVar

import typer

from loopctl.domain import loop_settings

F = TypeVar("F", bound=Callable[..., Any])
# Python types of the kinds Typer parses itself; the rest arrive as text
# and meet their row's rule.
_TYPES: dict[str, Any] = {"count": int, "number": float, "list": list[str], "map": list[str],
                          "paths": list[str], "flag": bool}
# The order `--help` lists the options in (users and the generated docs know
# it): a row not named here comes after these, in the table's order. Names
# of a command's own parameters may stand here too (`new_objective`).
HELP_ORDER = (
    "prompt", "prompt_file", "new_objective", "agent", "command", "cwd",
    "worktree", "base", "branch_prefix", "push", "pr", "merge", "checks_timeout", "copy",
    "max_file_size", "protect", "if", "if_timeout", "on_demand",
    "check", "check_timeout", "until_check", "check_metric", "fix_attempts", "notes",
    "fallback_agent", "on_github", "github_repo", "github_command", "github_anyone",
    "sandbox", "sandbox_write", "sandbox_read",
    "every", "cron", "tz", "min_delay", "max_delay", "timeout", "for", "max_runs",
    "max_failures", "max_deferrals", "no_progress", "budget_usd", "until", "overlap",
    "catch_up", "catch_up_window", "on_attention", "keep_runs", "notify",
    "max_log", "max_memory", "max_output_lines", "max_procs", "nice",
    "after", "env", "raw", "continue_session", "model", "agent_args", "yolo")


def option(key: str, command: str = "start") -> Any:
    """`Annotated[...]` for a `start`/`update` parameter of the row `key`:
    None when not given (`none`, where the row clears, is the text itself)."""
    setting = loop_settings.BY_KEY[key]
    kind: Any = Path if setting.path else str if setting.clears and setting.kind == "count" \
        else _TYPES.get(setting.kind, str)
    extra: dict[str, Any] = {"metavar": setting.metavar} if setting.metavar else {}
    if kind is int and not setting.group:  # the least by Click, the most by parse_loop
        extra["min"] = setting.low
    if kind is bool:
        extra["show_default"] = False
    text = setting.update_help if command == "update" and setting.update_help else setting.help
    return Annotated[Optional[kind], typer.Option(*setting.flags, help=text, **extra)]


def rows(command: str) -> tuple[loop_settings.Setting, ...]:
    """The rows that are options of `command`, in `--help` order."""
    return tuple(sorted((s for s in loop_settings.for_command(command) if s.flags),
                        key=_position))


def _position(setting: loop_settings.Setting | str) -> int:
    key = setting if isinstance(setting, str) else setting.key
    if key in HELP_ORDER:
        return HELP_ORDER.index(key)
    return len(HELP_ORDER) + list(loop_settings.BY_KEY).index(key)


def with_settings(command: str) -> Callable[[F], F]:
    """Give `command` (a function taking `**settings`) one option per row
    that it takes: Typer reads the signature, so the options are the
    table's, not a parameter list written again per command."""
    def wrap(func: F) -> F:
        signature = inspect.signature(func, eval_str=True)
        params = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
        extra = [inspect.Parameter(s.python, inspect.Parameter.KEYWORD_ONLY, default=None,
                                   annotation=option(s.key, command)) for s in rows(command)]
        placed = [p.replace(kind=p.KEYWORD_ONLY) for p in params if p.name in HELP_ORDER]
        ordered = sorted([*placed, *extra], key=lambda p: _position(_key(p.name)))
        # After the command's own options and before `--json`, which every
        # command's help ends with.
        tail = [p.replace(kind=p.KEYWORD_ONLY) for p in params if p.name == "as_json"]
        own = [p for p in params if p.name != "as_json" and p.name not in HELP_ORDER]
        func.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*own, *ordered, *tail])
        func.__annotations__ = {**func.__annotations__,
                                **{p.name: p.annotation for p in extra}}
        func.__annotations__.pop(next((p.name for p in signature.parameters.values()
                                       if p.kind is p.VAR_KEYWORD), ""), None)
        return func
    return wrap


def _key(python: str) -> str:
    return next((s.key for s in loop_settings.SETTINGS if s.python == python), python)


def group_rows(group: str) -> tuple[loop_settings.Setting, ...]:
    return tuple(s for s in loop_settings.SETTINGS if s.group == group and s.flags)


def pick(settings: dict[str, Any], group: str) -> dict[str, Any]:
    """The values of one group's options, by parameter name."""
    return {s.python: settings[s.python] for s in group_rows(group) if s.python in settings}


def own_changes(settings: dict[str, Any], command: str) -> dict[str, Any]:
    """The options of the rows without a group, each by its row's parser,
    as loops.yaml keys (None: the key removed)."""
    out: dict[str, Any] = {}
    for setting in rows(command):
        if not setting.group:
            out.update(given(setting.key, settings.get(setting.python)))
    return out


def given(key: str, value: Any) -> dict[str, Any]:
    """A value from the command line as its loops.yaml key, not yet parsed:
    `model.parse_loop` reads it once, by its row's kind, naming the option
    (loop_settings.read). Absent when not given, None (the key removed) for
    `none` or a flag turned off; a count that may be `none` arrives as text
    and goes on as the number it spells (what Typer does for the others)."""
    if value is None or value == []:
        return {}
    setting = loop_settings.BY_KEY[key]
    if setting.clears and value in ("none", ["none"]):
        return {key: None}
    if setting.kind == "flag":
        return {key: True if value else None}
    if setting.kind == "count" and isinstance(value, str):
        value = int(value) if value.isascii() and value.isdigit() else value
    return {key: list(value) if isinstance(value, (list, tuple)) else value}
