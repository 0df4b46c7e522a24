"""The checks of the settings table's context rules (a row's `context`,
named in domain/setting_rules.CONTEXT_RULES): rules that read the machine,
so not in the pure domain. One check per rule, said after the name of the
row that asks for it: `--worktree` where `start`/`update` got it on the
command line, `'worktree'` where `validate` read it in loops.yaml."""

from __future__ import annotations

import os
from collections.abc import Callable

from loopctl.domain.errors import UsageError
from loopctl.domain.loop_settings import SETTINGS
from loopctl.domain.model import LoopDef
from loopctl.domain.setting_rules import yaml_name


def git_repository(cwd: str, name: str) -> tuple[str, str | None]:
    """`git_repository`: (top level, checked-out branch or None) of the
    loop's folder; UsageError when it is in no repository (or git is
    missing). `start` and `update` need the answer, `validate` the verdict."""
    from loopctl.integrations.worktree import repository

    return repository(os.path.expanduser(cwd), name)


CHECKS: dict[str, Callable[[str, str], object]] = {"git_repository": git_repository}


def problems(loop: LoopDef, named: Callable[[str], str] = yaml_name) -> list[str]:
    """What the context rules of the rows `loop` sets say is wrong here."""
    said = []
    for setting in (s for s in SETTINGS if s.context and getattr(loop, s.name)):
        for rule in setting.context:
            try:
                CHECKS[rule](loop.cwd, named(setting.key))
            except UsageError as exc:
                said.append(exc.message)
    return said
