"""Options built from the table of loop settings (domain/loop_settings.py):
the flag, its help and, for a choice, a Click choice the completions offer."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any, Optional, TypeVar

import typer

from loopctl.domain import loop_settings
from loopctl.domain.errors import UsageError

F = TypeVar("F", bound=Callable[..., Any])
# A group of options that become loops.yaml keys together, through one
# translator of their own (the worktree's, the check's...): parameter name ->
# (its `Annotated` option, its default when not given).
OptionGroup = dict[str, tuple[Any, Any]]
# Python types of the kinds Typer parses itself; the rest arrive as text
# and meet their row's rule.
_TYPES: dict[str, Any] = {"count": int, "number": float, "list": list[str], "map": list[str],
                          "flag": bool}


def option(key: str) -> Any:
    """`Annotated[...]` for a `start`/`update` parameter of the row `key`:
    None when not given (`none`, where the row clears, is the text itself)."""
    setting = loop_settings.BY_KEY[key]
    kind: Any = str if setting.clears and setting.kind == "count" \
        else _TYPES.get(setting.kind, str)
    extra: dict[str, Any] = {"metavar": setting.metavar} if setting.metavar else {}
    if kind is int:
        extra["min"] = setting.low
    if kind is bool:
        extra["show_default"] = False
    return Annotated[Optional[kind], typer.Option(*setting.flags, help=setting.help, **extra)]


def with_settings(*keys: str, groups: tuple[OptionGroup, ...] = ()) -> Callable[[F], F]:
    """Give a command taking `**settings` one option per option of `groups`,
    then one per row in `keys`: Typer reads the signature, so the options are
    the table's and the groups', not a parameter list written again per
    command. `pick` takes a group's values back out of `settings`."""
    def wrap(func: F) -> F:
        signature = inspect.signature(func, eval_str=True)
        params = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
        grouped = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                     annotation=annotation)
                   for group in groups for name, (annotation, default) in group.items()]
        rows = [inspect.Parameter(loop_settings.BY_KEY[k].python, inspect.Parameter.KEYWORD_ONLY,
                                  default=None, annotation=option(k)) for k in keys]
        extra = [*grouped, *rows]
        # Keyword-only, so they go after the command's own options and before
        # `--json`, which every command's help ends with.
        tail = [p.replace(kind=p.KEYWORD_ONLY) for p in params if p.name == "as_json"]
        own = [p for p in params if p.name != "as_json"]
        func.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*own, *extra, *tail])
        func.__annotations__ = {**func.__annotations__,
                                **{p.name: p.annotation for p in extra}}
        func.__annotations__.pop(next((p.name for p in signature.parameters.values()
                                       if p.kind is p.VAR_KEYWORD), ""), None)
        return func
    return wrap


def pick(settings: dict[str, Any], group: OptionGroup) -> dict[str, Any]:
    """The values of one group's options, by parameter name."""
    return {name: settings[name] for name in group}


def given(key: str, value: str | int | None) -> dict[str, Any]:
    """A value from the command line as its loops.yaml key, checked by the
    row's one rule and named by the flag: absent when not given, None (the
    key removed) for `none`."""
    if value is None:
        return {}
    setting = loop_settings.BY_KEY[key]
    if setting.clears and value == "none":
        return {key: None}
    if setting.kind == "count" and isinstance(value, str):
        value = int(value) if value.isascii() and value.isdigit() else value
    if loop_settings.problem(setting, value):
        raise UsageError(f"bad {setting.option} {str(value)[:40]!r}: expected "
                         f"{loop_settings.expected(setting)}"
                         + (" or 'none'" if setting.clears else ""))
    return {key: value}
