"""Export to crontab: one line that runs `loopctl run NAME --scheduled` at
the loop's cron schedule, in its zone where this machine's cron honours
CRON_TZ."""

from __future__ import annotations

from loopctl.domain.errors import UsageError
from loopctl.domain.model import LoopDef
from loopctl.integrations.crontab import cron_word, home_pins, honours_cron_tz, scheduler_path
from loopctl.integrations.export.common import (
    STORE_SECRET,
    Export,
    Target,
    driver_env,
    local_python,
    scheduled,
    unset_driver_env,
)
from loopctl.integrations.export.cron_forms import check_dst, cron_line
from loopctl.integrations.export.schedules import target_cron


def to_crontab(loop: LoopDef, target: Target) -> Export:
    if loop.on_demand:
        raise UsageError(f"{loop.name} is an --on-demand loop: a crontab line needs a "
                         "schedule; fire it with `loopctl trigger` under `loopctl daemon` (or "
                         "cron's `loopctl tick`), or export it --to systemd, k8s or github")
    warnings: list[str] = []
    form = target_cron(loop, "crontab", warnings, target.allow_drift)
    schedule = cron_line(form, "crontab")
    if loop.cron:
        check_dst(form, loop.tz, "crontab", repeated=True)
    lines = []
    if loop.tz:
        if honours_cron_tz():
            lines.append(f"CRON_TZ={loop.tz}")
        else:
            warnings.append(f"this machine's cron ignores CRON_TZ: {schedule!r} fires in the "
                            f"system zone, not {loop.tz}; use --to systemd to keep the zone")
    line = f"{schedule} {_job(loop, target)}"
    if any(c in line for c in "\r\n\0"):
        raise UsageError("a path in the cron line contains a line break; cron reads one line "
                         "per job")
    warnings += unset_driver_env(loop, target, "the crontab line")
    if target.team_store and target.environ.get(STORE_SECRET, "").strip():
        # A crontab line is readable by anything that runs as you: no DSN in it.
        warnings.append("the crontab line does not carry LOOPCTL_STORE (it may hold a "
                        "password): cron's runs use loops.yaml's store: line, or none; set "
                        "store: there (the password in ~/.pgpass) or export --to systemd")
    lines.append(f"{line} # loopctl export {loop.name}")
    steps = [f"crontab -l | cat - {target.at(loop.name + '.crontab')} | crontab -   "
             "# add it to your table"]
    return Export({f"{loop.name}.crontab": "\n".join(lines) + "\n"}, warnings, steps)


def _job(loop: LoopDef, target: Target) -> str:
    """The command cron runs: the variables it needs (PATH, the home, the
    loop's `--env NAME` values from this shell), then loopctl, each word
    quoted for the shell and for cron's `%` (`cron_word`)."""
    for key, value in driver_env(loop, target):
        if any(c in value for c in "\r\n\0"):
            raise UsageError(f"cannot carry --env {key} into a crontab line: its value has a "
                             "line break (cron reads one line per job); export --to systemd, "
                             f"or give the value in loops.yaml (env: {{{key}: ...}})")
    pairs = [("PATH", scheduler_path([loop])), *home_pins(target.home_env, target.home),
             *driver_env(loop, target)]
    env = "".join(f"{key}={cron_word(value)} " for key, value in pairs)
    log = cron_word(f"{target.state_dir}/cron-{loop.name}.log")
    command = " ".join(cron_word(w) for w in [local_python(), "-m", "loopctl", *scheduled(loop)])
    return f"{env}{command} >> {log} 2>&1"
