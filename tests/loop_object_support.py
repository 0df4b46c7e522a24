"""One loop's LOOP object (commands/loop_view.LoopObject) as `status NAME`
shows it, for tests of how a field is rendered: a shell loop every hour,
just started, with `fields` in place of what it shows."""

from __future__ import annotations

from typing import Any

from loopctl.commands.loop_view import LoopObject
from loopctl.commands.views import describe
from loopctl.domain.model import parse_loop
from loopctl.domain.state import new_loop_state
from loopctl.fast.data_class import replace

NOW = 1.0e9


def loop_object(**fields: Any) -> LoopObject:
    loop = parse_loop("a", {"prompt": "p", "every": "1h", "agent": "shell"})
    return replace(describe(loop, new_loop_state(loop, NOW, zone=None), NOW), **fields)
