"""`doctor`'s question about a loop's name-only env entries (`--env KEY`,
read from the driver's environment at fire time): does what fires the loop
have KEY? The daemon's environment is read from the process; cron's is the
table's variables and the line's own assignments; a crontab line or a
systemd user unit made by `export` for this home carries KEY or not. A run
without KEY fails or misbehaves however healthy the loop looks."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Collection, Iterable
from pathlib import Path

from loopctl.domain.errors import LoopctlError
from loopctl.domain.model import LoopDef

Add = Callable[[str, str, str], None]
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
EXPORT_TAIL = " # loopctl export "


def wanted(loop: LoopDef) -> list[str]:
    """The names the loop takes from its driver's environment."""
    return sorted(key for key, value in loop.env.items() if value is None)


def check_env(loops: Iterable[LoopDef], have: Collection[str] | None, whose: str, fix: str,
              add: Add) -> None:
    """A warning per loop whose name-only env entries `have` lacks (None:
    cannot tell, so say nothing rather than guess)."""
    if have is None:
        return
    for loop in loops:
        missing = [key for key in wanted(loop) if key not in have]
        if missing:
            add("warn", "env", f"loop {loop.name!r} takes {', '.join(missing)} from its "
                f"driver's environment (--env NAME), which {whose} lacks: its runs go "
                f"without; {fix}")


def process_env_names(pid: int) -> set[str] | None:
    import psutil

    try:
        return set(psutil.Process(pid).environ())
    except (psutil.Error, OSError):
        return None


def line_assignments(line: str) -> dict[str, str] | None:
    """The `NAME=value` words a crontab job line sets before its command
    (after the five schedule fields), unquoted; None if it does not parse."""
    try:
        words = shlex.split(line.replace("\\%", "%"))
    except ValueError:
        return None
    found: dict[str, str] = {}
    for word in words[5:]:
        if not ASSIGNMENT.match(word):
            break
        key, _, value = word.partition("=")
        found[key] = value
    return found


def table_variables(lines: Iterable[str]) -> set[str]:
    """Names a crontab sets for every job (`NAME=value` lines)."""
    return {line.split("=", 1)[0].strip() for line in lines
            if ASSIGNMENT.match(line.strip()) and not line.lstrip().startswith("#")}


def check_cron_env(loops: list[LoopDef], line: str | None, add: Add) -> None:
    """The loops `cron install`'s tick line fires: cron's environment is
    the table's variables plus the line's assignments."""
    if not line or not any(wanted(loop) for loop in loops):
        return
    table = _crontab_lines()
    assigned = line_assignments(line)
    if table is None or assigned is None:
        return
    check_env(loops, table_variables(table) | set(assigned), "cron's environment (the "
              "crontab line and the table's variables)",
              "give the value in loops.yaml (env: {NAME: value}), or set NAME=value on its "
              "own line of the crontab", add)


def check_handoffs(loops: Iterable[LoopDef], pins: dict[str, str], add: Add) -> None:
    """The crontab lines and systemd user units `export` made for this home
    (`pins`: what locates it, paths.home_env())."""
    needy = [loop for loop in loops if wanted(loop)]
    if not needy:
        return
    table = _crontab_lines() or []
    variables = table_variables(table)
    fix = "export it again from a shell that has it, and install what that writes"
    for loop in needy:
        for job in (t for t in table if t.endswith(EXPORT_TAIL + loop.name)):
            assigned = line_assignments(job)
            if assigned is not None and _pinned(assigned, pins):
                check_env([loop], variables | set(assigned), "its exported crontab line",
                          fix, add)
        unit = _unit_env(loop.name)
        if unit is not None and _pinned(unit, pins):
            check_env([loop], set(unit), f"its systemd unit ({_unit_path(loop.name)})",
                      fix, add)


def _pinned(assigned: dict[str, str], pins: dict[str, str]) -> bool:
    """Whether a job locates this home (one made for another home is its own)."""
    return all(assigned.get(key) == value for key, value in pins.items())


def _crontab_lines() -> list[str] | None:
    from loopctl.integrations.crontab import read_crontab

    try:
        return read_crontab()
    except (LoopctlError, OSError):
        return None


def _unit_path(name: str) -> Path:
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"),
                                                                ".config")
    return Path(config, "systemd", "user", f"loopctl-{name}.service")


def _unit_env(name: str) -> dict[str, str] | None:
    """The `Environment=` assignments of an installed unit, `%%` as `%`."""
    from loopctl.storage.paths import read_bounded

    data = read_bounded(_unit_path(name), 1024 * 1024)
    if data is None:
        return None
    found: dict[str, str] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        if not line.startswith("Environment="):
            continue
        try:
            words = shlex.split(line[len("Environment="):])
        except ValueError:
            continue
        for word in words:
            key, _, value = word.partition("=")
            found[key] = value.replace("%%", "%")
    return found
