"""`loopctl export NAME --to crontab|systemd|k8s|github`: hand a loop to the
schedulers people already run. Each export runs `loopctl run NAME` against the
same definition, so limits, logs and decisions keep working.

`--every` has no exact cron form (it waits from the end of a run); it becomes
the nearest wall-clock cron schedule with a warning, and is refused where no
faithful conversion exists (under a minute, self-paced loops).
"""

from __future__ import annotations

import json
import math
import shlex
import sys
from dataclasses import dataclass, field
from typing import Any

from loopctl.durations import format_duration
from loopctl.errors import UsageError
from loopctl.model import LoopDef, to_raw

TARGETS = ("crontab", "systemd", "k8s", "github")
GITHUB_MINIMUM = 300
DOW_NAMES = ("Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat")


@dataclass
class Export:
    files: dict[str, str]
    warnings: list[str] = field(default_factory=list)


# -- schedules ---------------------------------------------------------------------


def _nearest(value: int, choices: list[int]) -> int:
    return min(choices, key=lambda c: (abs(c - value), c))


def every_to_cron(seconds: int, warnings: list[str]) -> str:
    """The cron schedule closest to `--every`; warns when it is not exact."""
    name = format_duration(seconds)
    warnings.append(f"--every {name} waits from the end of each run; the export fires on "
                    "wall-clock slots instead")
    if seconds < 60:
        raise UsageError(f"cannot export --every {name}: cron fires at most once a minute")
    if seconds % 604800 == 0 and seconds == 604800:
        return "0 0 * * 0"
    if seconds % 86400 == 0:
        days = seconds // 86400
        if days > 1:
            warnings.append(f"--every {name} became every {days} days of the month "
                            "(the count restarts each month)")
        return "0 0 * * *" if days == 1 else f"0 0 */{days} * *"
    if seconds % 3600 == 0 and seconds < 86400:
        hours = seconds // 3600
        exact = _nearest(hours, [1, 2, 3, 4, 6, 8, 12])
        if exact != hours:
            warnings.append(f"--every {name} became every {exact}h (cron steps must divide "
                            "a day)")
        return "0 * * * *" if exact == 1 else f"0 */{exact} * * *"
    minutes = max(round(seconds / 60), 1)
    if minutes >= 60:
        hours = _nearest(round(minutes / 60), [1, 2, 3, 4, 6, 8, 12, 24])
        warnings.append(f"--every {name} became every {hours}h")
        return "0 0 * * *" if hours == 24 else "0 * * * *" if hours == 1 \
            else f"0 */{hours} * * *"
    exact = _nearest(minutes, [1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30])
    if exact * 60 != seconds:
        warnings.append(f"--every {name} became every {exact}m (cron steps must divide an "
                        "hour)")
    return "* * * * *" if exact == 1 else f"*/{exact} * * * *"


def loop_cron(loop: LoopDef, warnings: list[str]) -> str:
    if loop.auto:
        raise UsageError(f"cannot export {loop.name!r}: a self-paced (--every auto) loop has "
                         "no schedule a scheduler could follow")
    if loop.cron:
        return loop.cron
    return every_to_cron(loop.every or 0, warnings)


_MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
           "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
           "@hourly": "0 * * * *"}


def _calendar_field(text: str, width: int, names: tuple[str, ...] | None = None) -> str:
    """One cron field in systemd's calendar syntax (lists, ranges, steps)."""
    if text == "*":
        return "*"

    def value(v: str) -> str:
        if names is not None:
            return names[int(v) % 7]
        return v.zfill(width)

    parts = []
    for part in text.split(","):
        base, _, step = part.partition("/")
        if base == "*":
            base = "0" if names is None else "0"
            if step:
                parts.append(f"{value(base)}/{step}")
                continue
        if "-" in base:
            lo, hi = base.split("-", 1)
            if names is not None:
                parts.append(f"{value(lo)}..{value(hi)}")
            else:
                parts.append(f"{value(lo)}..{value(hi)}" + (f"/{step}" if step else ""))
        else:
            parts.append(value(base) + (f"/{step}" if step else ""))
    return ",".join(parts)


def cron_to_calendar(expr: str, tz: str | None) -> str:
    """A five-field cron expression as a systemd OnCalendar= value."""
    expr = _MACROS.get(expr, expr)
    minute, hour, dom, month, dow = expr.split()
    if "/" in dow or (dom != "*" and dow != "*"):
        raise UsageError(f"cannot express cron {expr!r} as a systemd calendar: cron ORs "
                         "day-of-month and day-of-week")
    when = f"*-{_calendar_field(month, 2)}-{_calendar_field(dom, 2)} " \
           f"{_calendar_field(hour, 2)}:{_calendar_field(minute, 2)}:00"
    if dow != "*":
        when = f"{_calendar_field(dow, 1, DOW_NAMES)} {when}"
    return when + (f" {tz}" if tz else "")


# -- writers -------------------------------------------------------------------------


def _loopctl() -> str:
    return f"{shlex.quote(sys.executable)} -m loopctl"


def to_crontab(loop: LoopDef, home: str | None, state_dir: str) -> Export:
    warnings: list[str] = []
    schedule = loop_cron(loop, warnings)
    if loop.tz:
        warnings.append(f"cron evaluates {schedule!r} in the system zone, not {loop.tz}; "
                        "set CRON_TZ where your cron supports it")
    env = f"LOOPCTL_HOME={shlex.quote(home)} " if home else ""
    log = shlex.quote(f"{state_dir}/cron-{loop.name}.log")
    line = (f"{schedule} {env}{_loopctl()} run {shlex.quote(loop.name)} >> {log} 2>&1 "
            f"# loopctl export {loop.name}").replace("%", "\\%")
    return Export({f"{loop.name}.crontab": line + "\n"}, warnings)


def to_systemd(loop: LoopDef, home: str | None) -> Export:
    warnings: list[str] = []
    schedule = loop_cron(loop, warnings)
    unit = f"loopctl-{loop.name}"
    env = f"Environment=LOOPCTL_HOME={home}\n" if home else ""
    timeout = loop.timeout + 60
    service = (
        "[Unit]\n"
        f"Description=loopctl loop {loop.name}\n"
        "Documentation=man:loopctl(1)\n\n"
        "[Service]\n"
        "Type=oneshot\n"
        f"WorkingDirectory={loop.cwd}\n"
        f"{env}"
        f"ExecStart={sys.executable} -m loopctl run {loop.name}\n"
        f"TimeoutStartSec={timeout}\n"
        # loopctl's own exit codes: 75 means a run was already in flight.
        "SuccessExitStatus=75\n"
    )
    timer = (
        "[Unit]\n"
        f"Description=Fire loopctl loop {loop.name}\n\n"
        "[Timer]\n"
        f"OnCalendar={cron_to_calendar(schedule, loop.tz)}\n"
        # Like loopctl itself: time missed while off fires once on start-up.
        "Persistent=true\n"
        "AccuracySec=1s\n"
        f"Unit={unit}.service\n\n"
        "[Install]\n"
        "WantedBy=timers.target\n"
    )
    return Export({f"{unit}.service": service, f"{unit}.timer": timer}, warnings)


def _definition_yaml(loop: LoopDef, prompt_path: str) -> str:
    """The loop alone, runnable elsewhere: `cwd: .` is wherever the job runs."""
    from loopctl.store import dump_yaml_doc

    raw = to_raw(loop)
    raw["cwd"] = "."
    raw.pop("created_at", None)
    raw.pop("on_attention", None)  # a local path; it does not travel
    if raw.get("prompt_file"):
        raw["prompt_file"] = prompt_path
    return dump_yaml_doc({"version": 1, "loops": {loop.name: raw}})


def _api_key_env(loop: LoopDef) -> str | None:
    from loopctl.agents import PRESETS

    if loop.command:
        return None
    return PRESETS[loop.agent or "shell"].api_key_env


def to_k8s(loop: LoopDef, image: str, prompt_text: str | None) -> Export:
    import yaml

    warnings: list[str] = []
    schedule = loop_cron(loop, warnings)
    name = f"loopctl-{loop.name}".replace("_", "-").replace(".", "-")[:52]
    data = {"loops.yaml": _definition_yaml(loop, "/loopctl/prompt.md")}
    if loop.prompt_file and prompt_text is not None:
        data["prompt.md"] = prompt_text
    config_map = {"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "loopctl"}},
                  "data": data}
    env: list[dict[str, Any]] = [{"name": "LOOPCTL_HOME", "value": "/loopctl"}]
    key = _api_key_env(loop)
    if key:
        env.append({"name": key, "valueFrom": {"secretKeyRef": {
            "name": "loopctl-secrets", "key": key, "optional": True}}})
    mounts = [{"name": "definition", "mountPath": "/loopctl/loops.yaml",
               "subPath": "loops.yaml", "readOnly": True},
              {"name": "state", "mountPath": "/loopctl/state"},
              {"name": "work", "mountPath": "/work"}]
    if "prompt.md" in data:
        mounts.append({"name": "definition", "mountPath": "/loopctl/prompt.md",
                       "subPath": "prompt.md", "readOnly": True})
    spec: dict[str, Any] = {
        "schedule": schedule,
        "concurrencyPolicy": "Forbid",
        "startingDeadlineSeconds": 300,
        "successfulJobsHistoryLimit": 3,
        "failedJobsHistoryLimit": 3,
        "jobTemplate": {"spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": loop.timeout + 120,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "loopctl", "image": image,
                    "command": ["loopctl", "run", loop.name],
                    "workingDir": "/work", "env": env, "volumeMounts": mounts,
                }],
                "volumes": [
                    {"name": "definition", "configMap": {"name": name}},
                    {"name": "state", "emptyDir": {}},
                    {"name": "work", "emptyDir": {}},
                ],
            }},
        }},
    }
    if loop.tz:
        spec["timeZone"] = loop.tz
    cron_job = {"apiVersion": "batch/v1", "kind": "CronJob",
                "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "loopctl"}},
                "spec": spec}
    warnings.append(f"the image {image!r} must have loopctl and the agent installed; "
                    "state lives in an emptyDir, so limits count per job, not across jobs")
    text = yaml.safe_dump_all([config_map, cron_job], sort_keys=False)
    return Export({f"{name}.yaml": text}, warnings)


def to_github(loop: LoopDef, prompt_text: str | None) -> Export:
    import yaml

    warnings: list[str] = []
    if not loop.auto and loop.every and loop.every < GITHUB_MINIMUM:
        warnings.append(f"GitHub runs scheduled workflows at most every 5 minutes; "
                        f"--every {format_duration(loop.every)} became every 5m")
        schedule = "*/5 * * * *"
    else:
        schedule = loop_cron(loop, warnings)
    if loop.tz and loop.tz != "UTC":
        warnings.append(f"GitHub evaluates cron in UTC, not {loop.tz}: adjust the hours")
    key = _api_key_env(loop)
    env = {"LOOPCTL_HOME": "${{ runner.temp }}/loopctl"}
    if key:
        env[key] = "${{ secrets." + key + " }}"
    write_definition = (
        'mkdir -p "$LOOPCTL_HOME"\n'
        "cat > \"$LOOPCTL_HOME/loops.yaml\" <<'LOOPCTL_EOF'\n"
        + _definition_yaml(loop, "prompt.md") + "LOOPCTL_EOF\n")
    if loop.prompt_file and prompt_text is not None:
        write_definition += ("cat > prompt.md <<'LOOPCTL_EOF'\n" + prompt_text
                             + "\nLOOPCTL_EOF\n")
    steps = [
        {"uses": "actions/checkout@v4"},
        {"uses": "actions/setup-python@v5", "with": {"python-version": "3.11"}},
        {"name": "Install loopctl", "run": "pip install loopctl"},
        {"name": "Write the loop definition", "run": write_definition},
        {"name": f"Run {loop.name}", "run": f"loopctl run {loop.name}"},
        {"name": "Keep the run logs", "if": "always()",
         "uses": "actions/upload-artifact@v4",
         "with": {"name": f"loopctl-{loop.name}-logs",
                  "path": "${{ runner.temp }}/loopctl/state/runs"}},
    ]
    workflow = {
        "name": f"loopctl {loop.name}",
        "on": {"schedule": [{"cron": schedule}], "workflow_dispatch": {}},
        "concurrency": {"group": f"loopctl-{loop.name}", "cancel-in-progress": False},
        "permissions": {"contents": "read"},
        "jobs": {"run": {
            "runs-on": "ubuntu-latest",
            "timeout-minutes": max(math.ceil(loop.timeout / 60), 1),
            "env": env,
            "steps": steps,
        }},
    }
    header = ("# Generated by `loopctl export`. GitHub runs schedules in UTC, at most every\n"
              "# 5 minutes, and may start them late under load.\n")
    text = header + yaml.safe_dump(workflow, sort_keys=False, width=100)
    return Export({f"loopctl-{loop.name}.yml": text}, warnings)


def export(loop: LoopDef, target: str, *, home: str | None, state_dir: str, image: str,
           prompt_text: str | None) -> Export:
    if target == "crontab":
        return to_crontab(loop, home, state_dir)
    if target == "systemd":
        return to_systemd(loop, home)
    if target == "k8s":
        return to_k8s(loop, image, prompt_text)
    if target == "github":
        return to_github(loop, prompt_text)
    raise UsageError(f"bad --to {target!r}: expected one of {', '.join(TARGETS)}")


def as_json(result: Export) -> str:
    return json.dumps({"version": 1, "files": result.files, "warnings": result.warnings},
                      indent=2)
