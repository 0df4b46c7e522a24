"""`loopctl cron install|uninstall|status`: one line in the user's crontab.

The line runs `loopctl tick` every minute with the absolute path of this
installation, a PATH that finds the agents the loops name, the variables
that locate this home (LOOPCTL_HOME, else XDG_CONFIG_HOME and
XDG_STATE_HOME as resolved now: cron's HOME is the passwd entry's), and
output appended to `<state>/cron.log`. A trailing marker comment
naming the home identifies it, so `uninstall` removes exactly that line and
nothing else of the user's crontab. `LOOPCTL_CRONTAB` names another crontab
program (the tests use a stand-in).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable
from typing import Any

from loopctl.domain.errors import LoopctlError, UsageError
from loopctl.domain.model import LoopDef
from loopctl.storage.store import Store

MARKER = "# loopctl tick for"
BASE_PATH = ("/usr/local/bin", "/usr/bin", "/bin")


def crontab_program() -> str:
    program = os.environ.get("LOOPCTL_CRONTAB") or shutil.which("crontab")
    if not program:
        raise LoopctlError("no crontab program found: install cron (Debian/Ubuntu: "
                           "`apt-get install cron`) or keep `loopctl daemon` running instead")
    return program


def marker(store: Store) -> str:
    """The comment that ends our line, escaped like the line itself (`%` means
    newline in a crontab), so a home with `%` in its path still matches."""
    return f"{MARKER} {store.paths.state_dir}".replace("%", "\\%")


def read_crontab() -> list[str]:
    proc = subprocess.run([crontab_program(), "-l"], capture_output=True, text=True)
    if proc.returncode != 0:
        if "no crontab" in (proc.stderr or "").lower():
            return []
        raise LoopctlError(f"crontab -l failed: {(proc.stderr or '').strip() or proc.returncode}")
    return proc.stdout.splitlines()


def write_crontab(lines: list[str]) -> None:
    text = "\n".join(lines) + "\n" if lines else ""
    proc = subprocess.run([crontab_program(), "-"], input=text, capture_output=True, text=True)
    if proc.returncode != 0:
        raise LoopctlError(f"crontab refused the new table: {(proc.stderr or '').strip()}")


def scheduler_path(loops: Iterable[LoopDef]) -> str:
    """A PATH for a scheduler's bare environment (cron gives /usr/bin:/bin):
    where the loops' agents are found now, this interpreter, the usual dirs."""
    from loopctl.agents.presets import binary

    path: list[str] = []
    for loop in loops:
        found = shutil.which(binary(loop))
        if found and os.path.dirname(found) not in path:
            path.append(os.path.dirname(found))
    for folder in [os.path.dirname(sys.executable), *BASE_PATH]:
        if folder not in path:
            path.append(folder)
    return os.pathsep.join(path)


def cron_word(value: str) -> str:
    """One shell word for a crontab command. Cron reads an unescaped `%` as
    the end of the command and `\\%` as `%`, but a backslash just before
    (`\\\\%`) escapes the backslash, not the `%`: so each `%` stands outside
    the shell quotes as `\\%`, after a closing quote or a plain character,
    never after a backslash (Vixie cron's do_command.c, cronie's alike)."""
    return "\\%".join(shlex.quote(part) for part in value.split("%"))


def pinned_home() -> list[str]:
    """`NAME=value` words that make a job find this home (DESIGN §9)."""
    from loopctl.storage.paths import home_env

    return [f"{name}={shlex.quote(value)}" for name, value in home_env().items()]


def honours_cron_tz() -> bool:
    """cronie (`crond`) reads CRON_TZ; Debian's and BusyBox's cron do not."""
    return shutil.which("crond") is not None


def home_pins(home_env: dict[str, str], home: str | None) -> list[tuple[str, str]]:
    """What makes an exported job find this home (`paths.home_env`, or a
    target's LOOPCTL_HOME): a scheduler's HOME is the passwd entry's."""
    return list((home_env or ({"LOOPCTL_HOME": home} if home else {})).items())


def tick_line(store: Store) -> str:
    """The crontab line for this installation and home."""
    try:
        loops = list(store.read_defs().loops.values())
    except LoopctlError:
        loops = []
    path = scheduler_path(loops)
    env = [f"PATH={shlex.quote(path)}", *pinned_home()]
    log = shlex.quote(str(store.paths.state_dir / "cron.log"))
    command = f"{shlex.quote(sys.executable)} -m loopctl tick --quiet >> {log} 2>&1"
    # `%` means newline in a crontab line.
    line = f"* * * * * {' '.join(env)} {command}".replace("%", "\\%")
    if any(c in line + marker(store) for c in "\r\n\0"):
        raise UsageError("a path in the cron line contains a line break; cron reads one "
                         "line per job: use a LOOPCTL_HOME and Python path without one")
    return f"{line} {marker(store)}"


def install(store: Store) -> dict[str, Any]:
    from loopctl.storage.paths import ensure_dir, make_tick_mark

    ensure_dir(store.paths.state_dir)
    make_tick_mark(store.paths.last_tick)
    lines = read_crontab()
    line = tick_line(store)
    mine = [existing for existing in lines if existing.endswith(marker(store))]
    result: dict[str, Any] = {"version": 1, "installed": True, "changed": mine != [line],
                              "line": line, "replaced": [old for old in mine if old != line],
                              "hand_edited": []}
    if result["changed"]:
        kept = [existing for existing in lines if not existing.endswith(marker(store))]
        write_crontab(kept + [line])
        written = _last_written(store)
        if written is not None:  # else no telling who wrote what it replaces
            result["hand_edited"] = [old for old in result["replaced"] if old != written]
    _remember(store, line)
    return result


def _last_written(store: Store) -> str | None:
    from loopctl.storage.paths import read_bounded

    data = read_bounded(store.paths.cron_line_file, 64 * 1024)
    return data.decode("utf-8", "replace").strip() if data is not None else None


def _remember(store: Store, line: str) -> None:
    """The line as written (a later install tells a hand edit from it), its
    mtime the install time `doctor` waits a first tick from. Unchanged on an
    idempotent install, so that time stays the first one."""
    from loopctl.storage.atomic import atomic_write

    if _last_written(store) != line:
        atomic_write(store.paths.cron_line_file, (line + "\n").encode())


def uninstall(store: Store) -> dict[str, Any]:
    lines = read_crontab()
    kept = [existing for existing in lines if not existing.endswith(marker(store))]
    if len(kept) != len(lines):
        write_crontab(kept)
    from loopctl.storage.atomic import remove_file

    remove_file(store.paths.cron_line_file)
    return {"version": 1, "installed": False, "changed": len(kept) != len(lines)}


def cron_daemon_running() -> bool:
    import psutil

    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] in ("cron", "crond", "cronie", "busybox-crond"):
            return True
    return False


def status(store: Store) -> dict[str, Any]:
    lines = read_crontab()
    mine = [line for line in lines if line.endswith(marker(store))]
    return {"version": 1, "installed": bool(mine), "line": mine[0] if mine else None,
            "cron_running": cron_daemon_running(),
            "log": str(store.paths.state_dir / "cron.log"), "last_tick": last_tick(store)}


def last_tick(store: Store) -> str | None:
    """When a tick last reached this home (`<state>/last-tick`), or None."""
    from loopctl.domain.timestamps import iso

    try:
        mtime = os.stat(store.paths.last_tick).st_mtime
    except OSError:
        return None
    return iso(mtime) if mtime > 0 else None
