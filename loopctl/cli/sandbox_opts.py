"""`--sandbox`, `--sandbox-write`, `--sandbox-read` for `start` and `update`
(DESIGN §14): the options, their checks, and what `start` warns about."""

from __future__ import annotations

import os
import sys
from typing import Any

from loopctl.domain.confinement import check_extra
from loopctl.domain.errors import UsageError


def sandbox_changes(sandbox: str | None, sandbox_write: list[str] | None,
                    sandbox_read: list[str] | None) -> dict[str, Any]:
    """The options as loops.yaml keys; paths made absolute and checked to
    exist now, so a typo fails at `start`, not at 3 a.m."""
    changes: dict[str, Any] = {}
    if sandbox is not None:  # read once, by parse_loop (its row's kind)
        changes["sandbox"] = sandbox
    for key, given in (("sandbox_write", sandbox_write), ("sandbox_read", sandbox_read)):
        if given is None:
            continue
        option = "--" + key.replace("_", "-")
        if given == ["none"]:
            changes[key] = None
            continue
        changes[key] = [_checked(path, option) for path in given]
    return changes


def _checked(path: str, option: str) -> str:
    expanded = os.path.expanduser(path) if path.startswith("~/") else path
    problem = check_extra(os.path.abspath(expanded) if expanded else "", option)
    if problem:
        raise UsageError(problem)
    if not os.path.exists(expanded):
        raise UsageError(f"bad {option} {path!r}: no such file or directory")
    from loopctl.domain.confinement import holds_home

    real = os.path.realpath(expanded)
    if holds_home(real, os.path.realpath(os.path.expanduser("~"))):
        raise UsageError(f"bad {option} {path!r}: it is the root, your home or a folder "
                         "holding it; name the folders the agent needs")
    return real


def warn(raw: dict[str, Any], top_mode: str | None) -> None:
    """Said once, at `start`: a loop that will not be confined as asked."""
    from loopctl.domain import confinement
    from loopctl.engine.containment.sandbox import available

    mode = confinement.mode_for(raw.get("sandbox"), top_mode)
    agent = raw.get("command") is None and raw.get("agent", "shell") != "shell"
    if mode == "off" and raw.get("yolo"):
        print("warning: --yolo with --sandbox off: the agent may run anything you can, "
              "unconfined", file=sys.stderr)
    warn_agent_command(raw, mode)
    if not confinement.wants(mode, agent):
        return
    home = os.path.realpath(os.path.expanduser("~"))
    cwd = os.path.realpath(str(raw.get("cwd") or "."))
    if (home + "/").startswith(cwd.rstrip("/") + "/"):
        print(f"warning: --cwd {cwd} holds your home: confined there the agent could write "
              "all of it, so " + ("every run will fail (--sandbox on)" if mode == "on"
                                  else "runs will be unconfined") + "; give it a folder "
              "of its own", file=sys.stderr)
        return
    _, why = available()
    if why is None:
        return
    if mode == "on":
        print(f"warning: the sandbox is unavailable here ({why}); with --sandbox on every "
              "run will fail until it is", file=sys.stderr)
    else:
        print(f"warning: the sandbox is unavailable here ({why}); runs will be unconfined",
              file=sys.stderr)


def warn_agent_command(raw: dict[str, Any], mode: str) -> None:
    """A `--command` that runs an agent CLI is the user's own program to
    `auto`, so it runs unconfined: said at `start` and `update`."""
    import shlex

    from loopctl.domain.agent_cli import agent_cli

    command = raw.get("command")
    if mode != "auto" or not isinstance(command, (str, list)):
        return
    try:
        argv = shlex.split(command) if isinstance(command, str) else [str(w) for w in command]
    except ValueError:
        return
    name = agent_cli(argv)
    if name is not None:
        print(f"warning: --command runs {name}, an agent CLI, unconfined (--sandbox auto "
              "confines only agent presets); --sandbox on confines it, or use "
              "--agent for a preset", file=sys.stderr)
