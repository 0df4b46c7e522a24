"""Export to systemd: a user service that runs `loopctl run NAME
--scheduled`, and a timer that fires it (`--every` as loopctl means it,
cron schedules as `OnCalendar=` in their zone)."""

from __future__ import annotations

from loopctl.domain.errors import UsageError
from loopctl.domain.model import LoopDef
from loopctl.integrations.crontab import home_pins, scheduler_path
from loopctl.integrations.export.common import (
    MACHINE_ENV,
    Export,
    Target,
    driver_env,
    local_python,
    run_bound,
    scheduled,
    unset_driver_env,
)
from loopctl.integrations.export.cron_forms import calendar_lines, check_dst
from loopctl.integrations.export.schedules import target_cron


def systemd_quote(value: str, dollar: bool = True) -> str:
    """One word for a unit file: C-style double quotes, `%` specifiers
    escaped, and in Exec lines `$` too (systemd expands variables there)."""
    if any(c in value for c in "\r\n\0"):
        raise UsageError(f"cannot write {value[:60]!r} into a systemd unit: it contains a "
                         "line break")
    text = value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    if dollar:
        text = text.replace("$", "$$")
    return f'"{text}"'


def systemd_env(key: str, value: str) -> str:
    """One `Environment=` line whose value is any text: systemd unquotes and
    C-unescapes the word (so a line break travels as `\\n`), then expands
    `%` specifiers (so `%` is `%%`); it expands no `$` there."""
    if "\0" in value:
        raise UsageError(f"cannot carry {key} into a systemd unit: its value has a NUL byte")
    text = f"{key}={value}".replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    text = text.replace("\n", "\\n").replace("\r", "\\r")
    return f'Environment="{text}"\n'


def _systemd_path(value: str) -> str:
    """A path setting (WorkingDirectory=): no quotes, `%` escaped."""
    if any(c in value for c in "\r\n\0"):
        raise UsageError(f"cannot write {value[:60]!r} into a systemd unit: it contains a "
                         "line break")
    return value.replace("%", "%%")


def to_systemd(loop: LoopDef, target: Target) -> Export:
    warnings: list[str] = []
    unit = f"loopctl-{loop.name}"
    # A user manager's PATH rarely holds ~/.local/bin or npm's bin: give the
    # one where the agent is found now.
    env = f"Environment={systemd_quote('PATH=' + scheduler_path([loop]), dollar=False)}\n"
    for key, value in home_pins(target.home_env, target.home):
        env += f"Environment={systemd_quote(key + '=' + value, dollar=False)}\n"
    env += "".join(systemd_env(key, value) for key, value in driver_env(loop, target))
    env += _team_env(target)
    warnings += unset_driver_env(loop, target, f"{unit}.service")
    exec_start = " ".join(systemd_quote(arg) for arg in
                          [local_python(), "-m", "loopctl", *scheduled(loop)])
    service = (
        "[Unit]\n"
        f"Description=loopctl loop {loop.name}\n"
        "Documentation=man:loopctl(1)\n\n"
        "[Service]\n"
        "Type=oneshot\n"
        f"WorkingDirectory={_systemd_path(loop.cwd)}\n"
        f"{env}"
        f"ExecStart={exec_start}\n"
        f"TimeoutStartSec={run_bound(loop) + 60}\n"
        # loopctl's own exit codes: 75 means a run was already in flight.
        "SuccessExitStatus=75\n"
    )
    if loop.on_demand:  # a service without a timer: started when asked
        steps = [f"cp {target.at(unit + '.service')} ~/.config/systemd/user/",
                 f"systemctl --user daemon-reload && systemctl --user start {unit}.service"
                 "   # each start is one fire"]
        return Export({f"{unit}.service": service}, warnings, steps)
    timer = (
        "[Unit]\n"
        f"Description=Fire loopctl loop {loop.name}\n\n"
        "[Timer]\n"
        f"{_systemd_timing(loop, warnings)}"
        "AccuracySec=1s\n"
        f"Unit={unit}.service\n\n"
        "[Install]\n"
        "WantedBy=timers.target\n"
    )
    steps = [f"cp {target.at(unit + '.service')} {target.at(unit + '.timer')} "
             "~/.config/systemd/user/",
             f"systemctl --user daemon-reload && systemctl --user enable --now {unit}.timer"]
    return Export({f"{unit}.service": service, f"{unit}.timer": timer}, warnings, steps)


def _team_env(target: Target) -> str:
    """The team store (DESIGN §21) as this machine uses it: the unit runs on
    the home it was exported from, so loops.yaml's `store:` holds there;
    LOOPCTL_STORE from the exporting shell comes from a 0600 environment
    file (never the unit), and LOOPCTL_MACHINE keeps this machine's name."""
    lines = ""
    if target.team_store and target.store_env_file:
        lines += f"EnvironmentFile={_systemd_path(target.store_env_file)}\n"
    machine = target.environ.get(MACHINE_ENV)
    if target.team_store and machine:
        lines += systemd_env(MACHINE_ENV, machine)
    return lines


def _systemd_timing(loop: LoopDef, warnings: list[str]) -> str:
    """`--every` as loopctl means it: wait that long after each run ends
    (`OnUnitInactiveSec=`, any interval, seconds too), the first fire
    `--after` the timer starts; cron schedules as wall-clock `OnCalendar=`
    slots in their zone (two lines where the day fields OR), a slot missed
    while off fired once on start."""
    if loop.every and not loop.auto:
        return (f"OnActiveSec={max(loop.after or 0, 1)}s\n"
                f"OnUnitInactiveSec={loop.every}s\n")
    form = target_cron(loop, "systemd", warnings)
    # systemd fires a repeated wall time once, as loopctl does, but skips one
    # in a spring-forward gap.
    check_dst(form, loop.tz, "systemd", repeated=False)
    lines = calendar_lines(form, loop.tz)
    return "".join(f"OnCalendar={line}\n" for line in lines) + "Persistent=true\n"
