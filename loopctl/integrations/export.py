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

import base64
import json
import math
import shlex
import shutil
import sys
from typing import Any

from loopctl.domain.durations import format_duration
from loopctl.domain.errors import UsageError
from loopctl.domain.github import with_github_events
from loopctl.domain.model import LoopDef, to_raw
from loopctl.domain.plain import factory, record
from loopctl.integrations.crontab import scheduler_path
from loopctl.integrations.export_time import (
    cron_to_calendar,
    every_to_cron,
    github_schedule,
    longest_gap,
    loop_cron,
)

__all__ = ["Export", "Target", "every_to_cron", "export", "secret_names"]

TARGETS = ("crontab", "systemd", "k8s", "github")
GITHUB_MINIMUM = 300
CACHE_EVICTION_S = 7 * 86400
K8S_HOME = "/loopctl"
# The container's HOME: an emptyDir of its own, beside the working directory
# (`/work`), never it or above it: a working directory that holds the home
# cannot be confined (DESIGN §14), so runs there would fail or go unconfined.
K8S_USER_HOME = "/home/loopctl"
K8S_WORKDIR = "/work"
ON_DEMAND_CRON = "0 0 1 1 *"  # never used: the CronJob is suspended
# Where a workflow puts a prompt file: in the checkout, under a name no
# repository is likely to use.
PROMPT_FILE = ".loopctl-prompt.md"


@record
class Target:
    """Where the export goes and what it needs from the user."""

    name: str
    home: str | None = None        # LOOPCTL_HOME for local targets
    state_dir: str = ""
    image: str | None = None       # k8s
    state_size: str = "1Gi"        # k8s
    install: str | None = None     # github: a pinned pip requirement
    prompt_text: str | None = None
    out_dir: str | None = None     # where `-o DIR` writes the files: the next steps say so
    secrets_file: str | None = None  # k8s: where `--secrets-file` writes the env file

    def at(self, filename: str) -> str:
        """A written file as the next steps must name it (quoted for a shell)."""
        return shlex.quote(f"{self.out_dir.rstrip('/')}/{filename}" if self.out_dir
                           else filename)


@record
class Export:
    files: dict[str, str]
    warnings: list[str] = factory(list)
    next_steps: list[str] = factory(list)


def secret_names(loop: LoopDef) -> list[str]:
    """The env names a run needs from the target's secret store: the loop's
    own `env` keys and the preset's API key."""
    from loopctl.agents.presets import PRESETS

    names = set(loop.env)
    if not loop.command:
        # The fallback agent (DESIGN §18) needs its key where the loop runs too.
        for preset in (loop.agent or "shell", loop.fallback_agent):
            key = PRESETS[preset].api_key_env if preset else None
            if key:
                names.add(key)
    return sorted(names)


def traveling_definition(loop: LoopDef, prompt_path: str | None) -> str:
    """The loop alone, as it runs elsewhere: env names without values, `cwd:
    .` (wherever the job runs), no local hook, a fresh start there."""
    from loopctl.storage.yamlio import dump_yaml_doc

    raw = to_raw(loop)
    raw["cwd"] = "."
    raw.pop("created_at", None)
    raw.pop("on_attention", None)
    raw.pop("notify", None)  # Apprise URLs hold tokens: they never travel
    raw.pop("env", None)
    if loop.env:
        raw["env"] = dict.fromkeys(sorted(loop.env))
    if prompt_path is not None:
        raw["prompt_file"] = prompt_path
    return dump_yaml_doc({"version": 1, "loops": {loop.name: raw}})


def run_bound(loop: LoopDef) -> int:
    """Seconds one run may take on the target: the agent's timeout, plus the
    gate's and the check's (DESIGN §16, §17: both run there too, before and
    after the agent, each bounded by its own timeout)."""
    return loop.timeout + (loop.gate_timeout if loop.gate else 0) \
        + (loop.check_timeout if loop.check else 0)


def _scheduled(loop: LoopDef) -> list[str]:
    return ["run", loop.name, "--scheduled"]


def _local_python() -> str:
    if any(c in sys.executable for c in "\r\n\0"):
        raise UsageError("the Python path contains a line break; no scheduler can run it")
    return sys.executable


# -- crontab ---------------------------------------------------------------------------


def _cron_honours_cron_tz() -> bool:
    """cronie (`crond`) reads CRON_TZ; Debian's and BusyBox's cron do not."""
    return shutil.which("crond") is not None


def to_crontab(loop: LoopDef, target: Target) -> Export:
    if loop.on_demand:
        raise UsageError(f"{loop.name} is an --on-demand loop: a crontab line needs a "
                         "schedule; fire it with `loopctl trigger` under `loopctl daemon` (or "
                         "cron's `loopctl tick`), or export it --to systemd, k8s or github")
    warnings: list[str] = []
    schedule = loop_cron(loop, warnings)
    lines = []
    if loop.tz:
        if _cron_honours_cron_tz():
            lines.append(f"CRON_TZ={loop.tz}")
        else:
            warnings.append(f"this machine's cron ignores CRON_TZ: {schedule!r} fires in the "
                            f"system zone, not {loop.tz}; use --to systemd to keep the zone")
    env = f"PATH={shlex.quote(scheduler_path([loop]))} "
    env += f"LOOPCTL_HOME={shlex.quote(target.home)} " if target.home else ""
    log = shlex.quote(f"{target.state_dir}/cron-{loop.name}.log")
    command = shlex.join([_local_python(), "-m", "loopctl", *_scheduled(loop)])
    line = f"{schedule} {env}{command} >> {log} 2>&1".replace("%", "\\%")
    if any(c in line for c in "\r\n\0"):
        raise UsageError("a path in the cron line contains a line break; cron reads one line "
                         "per job")
    lines.append(f"{line} # loopctl export {loop.name}")
    steps = [f"crontab -l | cat - {target.at(loop.name + '.crontab')} | crontab -   "
             "# add it to your table"]
    return Export({f"{loop.name}.crontab": "\n".join(lines) + "\n"}, warnings, steps)


# -- systemd ---------------------------------------------------------------------------


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
    if target.home:
        env += f"Environment={systemd_quote('LOOPCTL_HOME=' + target.home, dollar=False)}\n"
    exec_start = " ".join(systemd_quote(arg) for arg in
                          [_local_python(), "-m", "loopctl", *_scheduled(loop)])
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


def _systemd_timing(loop: LoopDef, warnings: list[str]) -> str:
    """`--every` as loopctl means it: wait that long after each run ends
    (`OnUnitInactiveSec=`, any interval, seconds too), the first fire
    `--after` the timer starts; cron schedules as wall-clock `OnCalendar=`
    slots in their zone, a slot missed while off fired once on start."""
    if loop.every and not loop.auto:
        return (f"OnActiveSec={max(loop.after or 0, 1)}s\n"
                f"OnUnitInactiveSec={loop.every}s\n")
    schedule = loop_cron(loop, warnings)
    return f"OnCalendar={cron_to_calendar(schedule, loop.tz)}\nPersistent=true\n"


# -- Kubernetes ------------------------------------------------------------------------


def k8s_name(loop: LoopDef) -> str:
    """`loopctl-NAME` as a DNS label (CronJob names: at most 52). Loop names
    may hold `_` and `.`, which labels may not: such a name, or one cut to
    fit, gets a digest of the real name so `a_b` and `a-b` never share
    objects."""
    import hashlib

    name = f"loopctl-{loop.name}"
    if len(name) <= 52 and name.replace("-", "").isalnum():
        return name
    digest = hashlib.sha256(loop.name.encode()).hexdigest()[:8]
    label = name.replace("_", "-").replace(".", "-")[:43].rstrip("-")
    return f"{label}-{digest}"


def _labels() -> dict[str, Any]:
    return {"app.kubernetes.io/name": "loopctl"}


def to_k8s(loop: LoopDef, target: Target) -> Export:
    import yaml

    if not target.image:
        raise UsageError("--to k8s needs --image: an image with Python, loopctl and the "
                         "agent CLI installed (see the README)")
    warnings: list[str] = []
    # Suspended, an on-demand loop's CronJob never fires by itself: it is the
    # template `kubectl create job --from=cronjob/...` starts.
    schedule = ON_DEMAND_CRON if loop.on_demand else loop_cron(loop, warnings)
    name = k8s_name(loop)
    prompt_path = f"{K8S_HOME}/prompt.md" if loop.prompt_file else None
    data = {"loops.yaml": traveling_definition(loop, prompt_path)}
    if loop.prompt_file:
        data["prompt.md"] = target.prompt_text or ""
    config_map = {"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": name, "labels": _labels()}, "data": data}
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": f"{name}-state", "labels": _labels()},
             "spec": {"accessModes": ["ReadWriteOnce"],
                      "resources": {"requests": {"storage": target.state_size}}}}
    secret = name
    env: list[dict[str, Any]] = [{"name": "LOOPCTL_HOME", "value": K8S_HOME},
                                 {"name": "HOME", "value": K8S_USER_HOME}]
    env += [{"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
            for key in secret_names(loop)]
    container = {
        "name": "loopctl", "image": target.image,
        "command": ["loopctl", *_scheduled(loop)],
        "workingDir": K8S_WORKDIR, "env": env, "volumeMounts": _k8s_mounts(loop),
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}},
    }
    pod = {
        "restartPolicy": "Never",
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                            "fsGroup": 1000},
        "containers": [container],
        "volumes": [
            {"name": "definition", "configMap": {"name": name}},
            {"name": "state", "persistentVolumeClaim": {"claimName": f"{name}-state"}},
            {"name": "work", "emptyDir": {}},
            {"name": "home", "emptyDir": {}},
        ],
    }
    spec: dict[str, Any] = {
        "schedule": schedule,
        "concurrencyPolicy": "Forbid",
        "startingDeadlineSeconds": 300,
        "successfulJobsHistoryLimit": 3,
        "failedJobsHistoryLimit": 3,
        "jobTemplate": {"spec": {"backoffLimit": 0,
                                 "activeDeadlineSeconds": run_bound(loop) + 120,
                                 "template": {"spec": pod}}},
    }
    if loop.tz:
        spec["timeZone"] = loop.tz
    if loop.on_demand:
        spec["suspend"] = True
    cron_job = {"apiVersion": "batch/v1", "kind": "CronJob",
                "metadata": {"name": name, "labels": _labels()}, "spec": spec}
    text = yaml.safe_dump_all([config_map, claim, cron_job], sort_keys=False)
    return Export({f"{name}.yaml": text}, warnings, _k8s_steps(loop, target, name, secret))


def _k8s_mounts(loop: LoopDef) -> list[dict[str, Any]]:
    """The definition read-only, the state on its claim, the working
    directory and the HOME beside it, each an emptyDir."""
    mounts: list[dict[str, Any]] = [
        {"name": "definition", "mountPath": f"{K8S_HOME}/loops.yaml",
         "subPath": "loops.yaml", "readOnly": True},
        {"name": "state", "mountPath": f"{K8S_HOME}/state"},
        {"name": "work", "mountPath": K8S_WORKDIR},
        {"name": "home", "mountPath": K8S_USER_HOME}]
    if loop.prompt_file:
        mounts.append({"name": "definition", "mountPath": f"{K8S_HOME}/prompt.md",
                       "subPath": "prompt.md", "readOnly": True})
    return mounts


def _k8s_steps(loop: LoopDef, target: Target, name: str, secret: str) -> list[str]:
    """Create the Secret, apply the objects, and for an on-demand loop how
    to fire it."""
    steps = []
    if secret_names(loop):
        if target.secrets_file:
            steps.append(f"kubectl create secret generic {secret} "
                         f"--from-env-file={shlex.quote(target.secrets_file)}")
        else:
            steps.append(f"kubectl create secret generic {secret} --from-env-file=FILE   "
                         f"# FILE holds {', '.join(k + '=...' for k in secret_names(loop))}; "
                         "`--secrets-file FILE` writes it (0600)")
    steps.append(f"kubectl apply -f {target.at(name + '.yaml')}")
    if loop.on_demand:
        steps.append(f'kubectl create job --from=cronjob/{name} "{name[:40]}-$(date +%s)"'
                     "   # one fire")
    return steps


# -- GitHub Actions --------------------------------------------------------------------


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _guard_script(loop: LoopDef, offsets: dict[str, str]) -> str:
    """Runs only the UTC line made for the offset now in force in the zone;
    the trigger line arrives in an env var, never in the script."""
    cases = "".join(f"  {shlex.quote(cron)}) want={offset} ;;\n"
                    for cron, offset in offsets.items())
    return (
        'if [ "$EVENT" != schedule ]; then echo "fire=true" >> "$GITHUB_OUTPUT"; exit 0; fi\n'
        'case "$SCHEDULE" in\n' + cases + "  *) want=none ;;\nesac\n"
        f'now=$(TZ={shlex.quote(loop.tz or "UTC")} date +%z)\n'
        'if [ "$now" = "$want" ]; then echo "fire=true" >> "$GITHUB_OUTPUT"\n'
        f'else echo "not firing: this line is for UTC offset $want, {loop.tz} is at $now"; '
        'echo "fire=false" >> "$GITHUB_OUTPUT"; fi\n')


# GitHub-hosted runners end a job after 6 hours (docs.github.com, "Usage
# limits, billing, and administration": job execution time).
GITHUB_HOSTED_MINUTES = 360


def to_github(loop: LoopDef, target: Target) -> Export:
    from loopctl.integrations.install_source import check_spec, installed_spec
    from loopctl.storage.yamlio import dump_yaml

    warnings: list[str] = []
    install = check_spec(target.install) if target.install else installed_spec()
    utc = None if loop.on_demand else _github_crons(loop, warnings)
    env: dict[str, str] = {"LOOPCTL_HOME": "${{ runner.temp }}/loopctl"}
    # Names match [A-Za-z_][A-Za-z0-9_]*: nothing a user typed is expanded.
    env.update({name: "${{ secrets." + name + " }}" for name in secret_names(loop)})
    if loop.worktree and loop.pr:
        # gh reads GH_TOKEN; the workflow's own token opens the PR.
        env["GH_TOKEN"] = "${{ github.token }}"
        warnings.append(
            "the PR is opened with the workflow's own token, and PRs opened with it start no "
            "other workflow: your checks will not run on it"
            + (", so --merge waits for checks that never come (needs_review)" if loop.merge
               else "")
            + "; to have them run, store a personal access token (or a GitHub App token) as a "
            "secret and set GH_TOKEN: ${{ secrets.NAME }} in the workflow")
    minutes = max(math.ceil(run_bound(loop) / 60) + 10, 1)
    if minutes > GITHUB_HOSTED_MINUTES:
        # The check's timeout (10m by default) can tip a long --timeout over.
        warnings.append(
            f"a run may take {minutes} minutes here (--timeout, plus --if-timeout and "
            f"--check-timeout when set, plus setup), but ubuntu-latest ends a job after "
            f"{GITHUB_HOSTED_MINUTES}: the run would be cut off mid-way; lower them, or run "
            "on a self-hosted runner (runs-on)")
    if utc is not None:
        warnings.append("GitHub disables a scheduled workflow after 60 days without activity "
                        "in a public repository: re-enable it in the Actions tab (or push now "
                        "and then)")
    workflow = {
        "name": f"loopctl {loop.name}",
        "on": _github_events(loop, utc),
        "concurrency": {"group": f"loopctl-{loop.name}", "cancel-in-progress": False},
        "permissions": _github_permissions(loop),
        "jobs": {"run": {
            "runs-on": "ubuntu-latest",
            "timeout-minutes": minutes,
            "env": env,
            "steps": _github_steps(loop, target, install, utc),
        }},
    }
    header = ("# Generated by `loopctl export`. GitHub runs schedules in UTC, at most every\n"
              "# 5 minutes, and may start them late under load.\n")
    text = header + dump_yaml(with_github_events(workflow, loop, warnings))
    filename = f"loopctl-{loop.name}.yml"
    next_steps = [f"gh secret set {name}" for name in secret_names(loop)]
    next_steps.append(f"mkdir -p .github/workflows && cp {target.at(filename)} "
                      ".github/workflows/ && git add .github/workflows && git commit")
    if loop.on_demand:
        next_steps.append(f"gh workflow run {filename} -f payload=TEXT   # one fire; or POST a "
                          f"repository_dispatch of type loopctl-{loop.name} with "
                          '{"client_payload": {"payload": "TEXT"}}')
    return Export({filename: text}, warnings, next_steps)


def _github_events(loop: LoopDef, utc: Any) -> dict[str, Any]:
    """A schedule, or for an `--on-demand` loop the two ways to ask from
    outside, each with a payload."""
    if utc is not None:
        return {"schedule": [{"cron": c} for c in utc.crons], "workflow_dispatch": {}}
    return {"workflow_dispatch": {"inputs": {"payload": {
                "description": "Text for the run (at most 64 KiB): $LOOPCTL_TRIGGER_FILE",
                "required": False, "type": "string", "default": ""}}},
            "repository_dispatch": {"types": [f"loopctl-{loop.name}"]}}


# The payload arrives in an env var (never in the script) and is handed to
# `loopctl trigger`, which checks it; the fire it asks for is the next one.
TRIGGER_SCRIPT = ('if [ -n "$PAYLOAD" ]; then printf %s "$PAYLOAD" > "$RUNNER_TEMP/payload"; '
                  'set -- --payload "$RUNNER_TEMP/payload"; fi\n')


def _github_run_step(loop: LoopDef) -> dict[str, Any]:
    step: dict[str, Any] = {"name": f"Run {loop.name}",
                            "run": shlex.join(["loopctl", *_scheduled(loop)])}
    if loop.on_demand:
        step["env"] = {"PAYLOAD": "${{ github.event.inputs.payload || "
                                  "github.event.client_payload.payload }}"}
        step["run"] = (TRIGGER_SCRIPT + shlex.join(["loopctl", "trigger", loop.name])
                       + ' "$@"\n' + step["run"] + "\n")
    return step


def _github_permissions(loop: LoopDef) -> dict[str, str]:
    """Exactly what the hand-off needs of the workflow's token: a push
    writes contents, a PR writes pull requests, a merge reads the checks."""
    if not (loop.worktree and loop.push):
        return {"contents": "read"}
    permissions = {"contents": "write"}
    if loop.pr:
        permissions["pull-requests"] = "write"
    if loop.merge or (loop.pr and loop.fix_attempts):
        permissions.update({"checks": "read", "statuses": "read"})
    if loop.pr and loop.fix_attempts:  # PR feedback reads failed runs' logs
        permissions["actions"] = "read"
    return permissions


def _github_crons(loop: LoopDef, warnings: list[str]) -> Any:
    """The workflow's UTC cron lines (and whether a zone guard is needed),
    with a warning for each thing GitHub does differently."""
    if not loop.auto and loop.every and loop.every < GITHUB_MINIMUM:
        warnings.append(f"GitHub runs scheduled workflows at most every 5 minutes; "
                        f"--every {format_duration(loop.every)} became every 5m")
        local = "*/5 * * * *"
    else:
        local = loop_cron(loop, warnings)
    utc = github_schedule(local, loop.tz)
    if loop.tz and loop.tz != "UTC":
        warnings.append(f"GitHub runs cron in UTC: {local!r} in {loop.tz} became "
                        + " and ".join(repr(c) for c in utc.crons)
                        + (" with a guard step that skips the line for the other UTC offset"
                           if utc.needs_guard else ""))
    if not loop.command and loop.agent != "shell":
        from loopctl.agents.presets import binary

        warnings.append(f"the workflow installs loopctl, not {binary(loop)}: add a step that "
                        f"installs the agent CLI (pinned) before `Run {loop.name}`")
    if longest_gap(utc.crons[0]) > CACHE_EVICTION_S:
        warnings.append("GitHub evicts a cache not used for 7 days: with fires further apart "
                        "than that, the loop's state (runs used, failures, sessions) is lost "
                        "between fires")
    return utc


def _github_steps(loop: LoopDef, target: Target, install: str,
                  utc: Any) -> list[dict[str, Any]]:
    """Install, restore the state, write the definition, (guard,) run, save."""
    state = "${{ runner.temp }}/loopctl/state"
    # `/` cannot occur in a loop name, so no loop's prefix matches another's
    # keys (`ci` must never restore the state of `ci-nightly`).
    key = f"loopctl/{loop.name}/"
    definition = traveling_definition(loop, PROMPT_FILE if loop.prompt_file else None)
    write = ('mkdir -p "$LOOPCTL_HOME"\n'
             'printf %s "$DEFINITION" | base64 -d > "$LOOPCTL_HOME/loops.yaml"\n'
             'chmod 0400 "$LOOPCTL_HOME/loops.yaml"\n')
    write_env = {"DEFINITION": _b64(definition)}
    if loop.prompt_file:
        write += f'printf %s "$PROMPT" | base64 -d > {PROMPT_FILE}\n'
        write_env["PROMPT"] = _b64(target.prompt_text or "")
    run_step = _github_run_step(loop)
    steps: list[dict[str, Any]] = [
        {"uses": "actions/checkout@v4"},
        {"uses": "actions/setup-python@v5", "with": {"python-version": "3.11"}},
        {"name": "Install loopctl (pinned)", "env": {"LOOPCTL_INSTALL": install},
         "run": 'python -m pip install "$LOOPCTL_INSTALL"'},
        {"name": "Restore the loop's state", "uses": "actions/cache/restore@v4",
         "with": {"path": state, "key": f"{key}${{{{ github.run_id }}}}",
                  "restore-keys": key}},
        {"name": "Write the loop definition", "env": write_env, "run": write},
    ]
    if utc is not None and utc.needs_guard:
        steps.append({"name": f"Fire only at {loop.tz} wall-clock time", "id": "zone",
                      "env": {"EVENT": "${{ github.event_name }}",
                              "SCHEDULE": "${{ github.event.schedule }}"},
                      "run": _guard_script(loop, utc.offsets)})
        run_step["if"] = "steps.zone.outputs.fire == 'true'"
    return [*steps, run_step,
            {"name": "Save the loop's state", "if": "always()", "uses": "actions/cache/save@v4",
             "with": {"path": state,
                      "key": f"{key}${{{{ github.run_id }}}}-${{{{ github.run_attempt }}}}"}},
            {"name": "Keep the run logs", "if": "always()", "uses": "actions/upload-artifact@v4",
             "with": {"name": f"loopctl-{loop.name}-logs-${{{{ github.run_id }}}}",
                      "path": f"{state}/runs", "if-no-files-found": "ignore"}}]


WRITERS = {"crontab": to_crontab, "systemd": to_systemd, "k8s": to_k8s, "github": to_github}


def export(loop: LoopDef, target: Target) -> Export:
    writer = WRITERS.get(target.name)
    if writer is None:
        raise UsageError(f"bad --to {target.name!r}: expected one of {', '.join(TARGETS)}")
    result = writer(loop, target)
    if loop.notify and target.name in ("k8s", "github"):
        result.warnings.append("notification targets do not travel (their URLs hold tokens); "
                               "the exported loop notifies no one")
    return result


def secrets_env_file(loop: LoopDef, environ: dict[str, str]) -> tuple[str, list[str]]:
    """KEY=VALUE lines for `kubectl create secret --from-env-file`: values
    from the definition, else from this environment; and the names missing."""
    lines, missing = [], []
    for key in secret_names(loop):
        value = loop.env.get(key)
        if value is None:
            value = environ.get(key)
        if value is None or "\n" in value:
            missing.append(key)
            continue
        lines.append(f"{key}={value}")
    return "".join(line + "\n" for line in lines), missing


def as_json(result: Export) -> str:
    return json.dumps({"version": 1, "files": result.files, "warnings": result.warnings,
                       "next_steps": result.next_steps}, indent=2)
