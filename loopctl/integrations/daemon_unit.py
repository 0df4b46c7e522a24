"""`loopctl daemon --print-unit`: a systemd user unit that runs this
installation's daemon for this home, pinned as `cron install` and `export
--to systemd` pin theirs (DESIGN §9): the absolute Python, a PATH that finds
today's agents, and the variables that locate this home (a user manager's
HOME is the passwd entry's, and it reads no shell profile). The README's
FAQ unit is this output with placeholders (tests/house keeps them equal)."""

from __future__ import annotations

from loopctl.domain.model import LoopDef
from loopctl.integrations.crontab import scheduler_path
from loopctl.integrations.export.common import local_python
from loopctl.integrations.export.systemd import systemd_quote


def daemon_unit(loops: list[LoopDef], home_env: dict[str, str], args: list[str]) -> str:
    """The unit's text; `args`: the daemon's own options, passed as given."""
    env = [f"Environment={systemd_quote('PATH=' + scheduler_path(loops), dollar=False)}"]
    env += [f"Environment={systemd_quote(f'{key}={value}', dollar=False)}"
            for key, value in home_env.items()]
    exec_start = " ".join([systemd_quote(local_python()), "-m loopctl daemon",
                           *(systemd_quote(arg) for arg in args)])
    return "\n".join([
        "[Unit]", "Description=loopctl daemon", "",
        "[Service]", *env, f"ExecStart={exec_start.rstrip()}",
        "Restart=on-failure",
        # Runs in flight finish when the daemon restarts (their supervisors
        # are detached; the default KillMode would kill them with it).
        "KillMode=process", "",
        "[Install]", "WantedBy=default.target", ""])
