"""`doctor`'s question about drivers: will anything fire the active loops,
and can that driver find each loop's agent?

A driver is the daemon holding the lease or the crontab line `loopctl cron
install` wrote (cron must be running for it to count). Each has its own PATH:
the daemon's is read from the process (/proc, through psutil), the cron
line's from the line itself. A loop whose agent is missing there fails at
every fire, however healthy `doctor` looks from the user's shell."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any

from loopctl.commands.doctor_env import check_cron_env, check_env, process_env_names
from loopctl.domain.errors import LoopctlError
from loopctl.domain.model import LoopDef
from loopctl.fast.data_class import record
from loopctl.storage.store import Store

Add = Callable[[str, str, str], None]


@record(frozen=True)
class CronDriver:
    """The crontab line (`installed`, its `line` and the `path` it sets) and
    cron itself (`running`); `error`: why the crontab could not be read."""

    installed: bool
    running: bool
    path: str | None = None
    error: str | None = None
    line: str | None = None

    def fires(self) -> bool:
        return self.installed and self.running


def cron_driver(store: Store) -> CronDriver:
    """The crontab line and cron itself."""
    from loopctl.integrations import crontab

    try:
        status = crontab.status(store)
    except LoopctlError as exc:  # no crontab program, or it failed
        return CronDriver(installed=False, running=False, error=exc.message)
    return CronDriver(installed=status["installed"], running=status["cron_running"],
                      path=line_path(status["line"]) if status["line"] else None,
                      line=status["line"])


def line_path(line: str) -> str | None:
    """The `PATH=...` assignment of a crontab line, unquoted."""
    import shlex

    try:
        words = shlex.split(line.replace("\\%", "%"))
    except ValueError:
        return None
    return next((w[len("PATH="):] for w in words if w.startswith("PATH=")), None)


def process_path(pid: int) -> str | None:
    """The PATH a process runs with (None when it cannot be read)."""
    import psutil

    try:
        return psutil.Process(pid).environ().get("PATH")
    except (psutil.Error, OSError):
        return None


def check_drivers(store: Store, loops: list[LoopDef], holder: Any, add: Add) -> None:
    """`loops`: the active ones. Error when nothing will fire them, with the
    one fix that applies; a warning per agent the driver's PATH lacks."""
    if not loops:
        return
    daemon = holder is not None and holder.role == "daemon"
    cron = cron_driver(store)
    count = f"{len(loops)} active loop{'s' if len(loops) != 1 else ''}"
    if daemon:
        add("ok", "drivers", f"the daemon (pid {holder.pid}) fires {count}")
        _check_paths(loops, process_path(holder.pid), f"the daemon's (pid {holder.pid})",
                     "restart `loopctl daemon` from a shell whose PATH finds it", add)
        check_env(loops, process_env_names(holder.pid), f"the daemon's (pid {holder.pid})",
                  "restart `loopctl daemon` from a shell that has it, or give the value in "
                  "loops.yaml (env: {NAME: value})", add)
        return
    if cron.fires():
        level, message = cron_ticks(store, count)
        add(level, "drivers", message)
        _check_paths(loops, cron.path, "the crontab line's",
                     "run `loopctl cron install` again (it writes the PATH of today's agents)",
                     add)
        check_cron_env(loops, cron.line, add)
        return
    them = "them" if len(loops) != 1 else "it"
    add("error", "drivers", f"{count} but nothing will fire {them}: " + _fix(cron))


def cron_ticks(store: Store, count: str) -> tuple[str, str]:
    """Whether the crontab line's ticks reach this home: a line exists and
    cron runs, yet a tick that resolves another home (cron's own HOME, an
    old line without the pinned home, a Python that is gone) fires nothing."""
    from loopctl import clock

    now = clock.now()
    ticked, installed = _mtime(store.paths.last_tick), _mtime(store.paths.cron_line_file)
    if ticked is not None and now - ticked <= TICK_GRACE_S:
        return "ok", f"the crontab line fires {count} every minute (last tick " \
            f"{_ago(now - ticked)} ago)"
    if installed is not None and now - installed <= TICK_GRACE_S \
            and (ticked is None or ticked < installed):
        return "ok", (f"the crontab line was installed {_ago(now - installed)} ago; its "
                      f"first tick should land within a minute (run doctor again to see it)")
    last = f"the last {_ago(now - ticked)} ago" if ticked is not None else "none yet"
    return "error", (
        f"the crontab line is installed and cron runs, but no tick has reached this home "
        f"in the last {TICK_GRACE_S // 60} minutes ({last}), so nothing fires the {count}: "
        f"see {store.paths.state_dir / 'cron.log'}; `loopctl cron install` again writes a "
        "line that pins this home")


TICK_GRACE_S = 180  # cron fires each minute; a few missed ones mean none arrive


def _mtime(path: Any) -> float | None:
    import os

    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return None
    return mtime if mtime > 0 else None  # `cron install` makes last-tick at 0: none yet


def _ago(seconds: float) -> str:
    from loopctl.domain.durations import format_duration

    return format_duration(max(int(seconds), 0))


def _fix(cron: CronDriver) -> str:
    if cron.installed:
        return ("the crontab line is installed but no cron daemon is running; start cron "
                "(e.g. `sudo service cron start`) or keep `loopctl daemon` running")
    if cron.error and cron.error.startswith("no crontab program"):
        return ("no daemon holds the lease and there is no crontab program; keep `loopctl "
                "daemon` running (or install cron, then `loopctl cron install`)")
    if cron.error:
        return f"no daemon holds the lease and {cron.error}; keep `loopctl daemon` running"
    if not cron.running:
        return ("no daemon holds the lease, no crontab line runs `loopctl tick`, and no cron "
                "daemon is running; keep `loopctl daemon` running")
    return ("no daemon holds the lease and no crontab line runs `loopctl tick`; run "
            "`loopctl cron install` (or keep `loopctl daemon` running)")


def _check_paths(loops: list[LoopDef], path: str | None, whose: str, fix: str,
                 add: Add) -> None:
    """One line per missing program, naming its loops: the PATH (often 200
    characters) is said once, not once per loop."""
    from loopctl.agents.presets import binary

    if path is None:
        return  # cannot tell: say nothing rather than guess
    missing: dict[str, list[str]] = {}
    for loop in loops:
        agent = binary(loop)
        if shutil.which(agent, path=path) is None:
            missing.setdefault(agent, []).append(repr(loop.name))
    for agent, names in missing.items():
        who = f"loop {names[0]} needs" if len(names) == 1 else \
            f"{len(names)} loops ({', '.join(names[:5])}{' ...' if len(names) > 5 else ''}) need"
        add("warn", "agents", f"{who} {agent!r}, which is not on {whose} PATH ({path}): "
            f"their runs fail with `agent not found`; {fix}")
