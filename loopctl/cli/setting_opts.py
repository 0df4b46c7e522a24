"""Options built from the table of loop settings (domain/loop_settings.py):
the flag, its help and, for a choice, a Click choice the completions offer."""

from __future__ import annotations

from typing import Any, Optional

import typer

from loopctl.domain import loop_settings
from loopctl.domain.errors import UsageError


def option(key: str) -> Any:
    """`Annotated[...]` for a `start`/`update` parameter of the row `key`."""
    from typing import Annotated

    setting = loop_settings.BY_KEY[key]
    kind: Any = str if setting.clears or setting.kind != "count" else int
    extra: dict[str, Any] = {"metavar": setting.metavar} if setting.metavar else {}
    return Annotated[Optional[kind], typer.Option(*setting.flags, help=setting.help, **extra)]


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
