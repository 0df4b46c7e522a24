"""`loopctl export NAME --to crontab|systemd|k8s|github`: hand a loop to a
scheduler people already run, keeping what makes loopctl worth using
(DESIGN §9):

- every target runs `loopctl run NAME --scheduled`, which fires only when a
  due fire under `tick` would: the scheduler owns the timing, loopctl the
  bounds;
- state lives where the next fire finds it (the local home, a
  PersistentVolumeClaim, a restored-and-saved Actions cache);
- env values never enter an exported file: only names travel, and each
  target takes the values from its own secret store;
- user text is data: the definition and prompt travel as a ConfigMap value
  or as base64 in the workflow, never inside a heredoc or a `${{ }}`;
- wall-clock time keeps its zone (systemd `OnCalendar=` with the zone,
  CronJob `timeZone`, GitHub: one UTC line per offset plus a guard).
"""

from __future__ import annotations

import json
from typing import Any

from loopctl.domain.errors import UsageError
from loopctl.domain.model import LoopDef
from loopctl.integrations.export.common import (
    TARGETS,
    Export,
    Target,
    secret_names,
    traveling_definition,
)
from loopctl.integrations.export.crontab import to_crontab
from loopctl.integrations.export.github import GITHUB_HOSTED_MINUTES, to_github
from loopctl.integrations.export.k8s import secrets_env_file, to_k8s
from loopctl.integrations.export.schedules import every_to_cron
from loopctl.integrations.export.systemd import systemd_quote, to_systemd

__all__ = ["GITHUB_HOSTED_MINUTES", "TARGETS", "Export", "Target", "as_json", "every_to_cron",
           "export", "secret_names", "secrets_env_file", "systemd_quote",
           "traveling_definition"]

WRITERS: dict[str, Any] = {"crontab": to_crontab, "systemd": to_systemd, "k8s": to_k8s,
                           "github": to_github}


def export(loop: LoopDef, target: Target) -> Export:
    writer = WRITERS.get(target.name)
    if writer is None:
        raise UsageError(f"bad --to {target.name!r}: expected one of {', '.join(TARGETS)}")
    result = writer(loop, target)
    result.warnings += _elsewhere_warnings(loop, target)
    if loop.notify and target.name in ("k8s", "github"):
        result.warnings.append("notification targets do not travel (their URLs hold tokens); "
                               "the exported loop notifies no one")
    return result


def _elsewhere_warnings(loop: LoopDef, target: Target) -> list[str]:
    """A loop whose `machines:` globs leave out the target's store name
    would never fire there (DESIGN §21): say so at export time."""
    from loopctl.domain.team import machines_of, runs_on
    from loopctl.integrations.export.github import github_machine
    from loopctl.integrations.export.k8s import k8s_machine

    namer = {"k8s": k8s_machine, "github": github_machine}.get(target.name)
    if not target.team_store or namer is None or runs_on(loop, machine := namer(loop)):
        return []
    return [f"{loop.name}'s machines: ({', '.join(machines_of(loop))}) leave out this "
            f"target's name in the store, {machine}: it would never fire there; add it"]


def as_json(result: Export) -> str:
    return json.dumps({"version": 1, "files": result.files, "warnings": result.warnings,
                       "next_steps": result.next_steps}, indent=2)
