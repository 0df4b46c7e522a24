"""The `loops.yaml` form of a loop definition: what `model.parse_loop`
reads back (the one writer of a loop's keys), made from the rows of the
settings table: each row says when it is written (`write`, `when`) and its
kind how (a duration as 1h30m, a size as 100MiB, a command as a list)."""

from __future__ import annotations

from loopctl.domain import loop_settings
from loopctl.domain.model import LoopDef
from loopctl.domain.sizes import format_size

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any


def to_raw(loop: LoopDef) -> dict[str, object]:
    """The `loops.yaml` form of a definition: what `parse_loop` reads back.
    Limits are always written out so the file says what bounds each loop.
    An open mapping on purpose, not a record: its keys are the settings
    rows' (whichever are set), its values YAML text, numbers, lists and
    mappings, and the one reader of it is `parse_loop`."""
    raw = _head(loop)
    for setting in loop_settings.SETTINGS:
        if setting.write == "head" or (setting.when and not getattr(loop, _field(setting.when))):
            continue
        value = getattr(loop, setting.name)
        if setting.write != "always" and (_unset(value) or _same(value, setting.default)):
            continue
        raw[setting.key] = written(setting, value)
    return raw


def written(setting: loop_settings.Setting, value: Any) -> Any:
    """A field's value as loops.yaml holds it."""
    kind = setting.kind
    if kind == "duration":
        from loopctl.domain.durations import format_duration

        return format_duration(int(value))
    if kind == "size":
        return format_size(int(value))
    if kind in ("command", "list", "paths"):
        return list(value)
    if kind == "map":
        return dict(value)
    return value


def _field(key: str) -> str:
    row = loop_settings.BY_KEY.get(key)
    return row.name if row else key  # `auto` is a field with no row of its own


def _unset(value: Any) -> bool:
    """Nothing to write: None, off, or an empty list or mapping (0 is a value)."""
    return value is None or value is False or (type(value) in (tuple, list, dict) and not value)


def _same(value: Any, default: Any) -> bool:
    return type(value) is type(default) and value == default


def _head(loop: LoopDef) -> dict[str, object]:
    """What the loop does and when: the prompt (or its file), the agent (or
    its command) and one schedule, in the order a person reads them."""
    from loopctl.domain.durations import format_duration as fd

    raw: dict[str, object] = {}
    if loop.prompt_file is not None:
        raw["prompt_file"] = loop.prompt_file
    elif loop.prompt is not None:
        raw["prompt"] = loop.prompt
    if loop.command:
        raw["command"] = list(loop.command)
    else:
        raw["agent"] = loop.agent
    if loop.on_demand:
        raw["on_demand"] = True
    elif loop.cron:
        raw["cron"] = loop.cron
        if loop.tz:
            raw["tz"] = loop.tz
    else:
        raw["every"] = "auto" if loop.auto else fd(loop.every or 0)
    return raw
