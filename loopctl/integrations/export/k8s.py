"""Export to Kubernetes: a ConfigMap with the definition (and prompt), a
PersistentVolumeClaim for the state, and a CronJob that runs `loopctl run
NAME --scheduled`; env values come from a Secret, never the manifest."""

from __future__ import annotations

import shlex
from typing import Any

from loopctl.domain.errors import UsageError
from loopctl.domain.model import LoopDef
from loopctl.integrations.export.common import (
    MACHINE_ENV,
    Export,
    Target,
    run_bound,
    scheduled,
    secret_names,
    traveling_definition,
)
from loopctl.integrations.export.cron_forms import check_dst, cron_line
from loopctl.integrations.export.schedules import target_cron

K8S_HOME = "/loopctl"
# The container's HOME: an emptyDir of its own, beside the working directory
# (`/work`), never it or above it: a working directory that holds the home
# cannot be confined (DESIGN §14), so runs there would fail or go unconfined.
K8S_USER_HOME = "/home/loopctl"
K8S_WORKDIR = "/work"
# `job-name` is set on a Job's pods by every Kubernetes version
# (`batch.kubernetes.io/job-name` only from 1.27).
JOB_LABEL = "metadata.labels['job-name']"
JOB_ENV = "LOOPCTL_K8S_JOB"
ON_DEMAND_CRON = "0 0 1 1 *"  # never used: the CronJob is suspended


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


def k8s_machine(loop: LoopDef) -> str:
    """The CronJob's name in the team store (LOOPCTL_MACHINE there)."""
    return f"k8s:{k8s_name(loop)}"


def _labels() -> dict[str, Any]:
    return {"app.kubernetes.io/name": "loopctl"}


def _k8s_schedule(loop: LoopDef, target: Target, warnings: list[str]) -> str:
    """The CronJob's schedule, read in its `timeZone` as loopctl reads it;
    robfig/cron's DST handling is not §3's, so a slot in a changing hour is
    refused."""
    form = target_cron(loop, "k8s", warnings, target.allow_drift)
    if loop.cron:
        check_dst(form, loop.tz, "k8s", repeated=True)
    return cron_line(form, "k8s")


def to_k8s(loop: LoopDef, target: Target) -> Export:
    import yaml

    if not target.image:
        raise UsageError("--to k8s needs --image: an image with Python, loopctl and the "
                         "agent CLI installed (see docs/exports.md)")
    warnings: list[str] = []
    # Suspended, an on-demand loop's CronJob never fires by itself: it is the
    # template `kubectl create job --from=cronjob/...` starts.
    schedule = ON_DEMAND_CRON if loop.on_demand else _k8s_schedule(loop, target, warnings)
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
    pod = _k8s_pod(loop, target, name, secret)
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


def _k8s_pod(loop: LoopDef, target: Target, name: str, secret: str) -> dict[str, Any]:
    env: list[dict[str, Any]] = [{"name": "LOOPCTL_HOME", "value": K8S_HOME},
                                 {"name": "HOME", "value": K8S_USER_HOME}]
    env += [{"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
            for key in secret_names(loop, target.team_store)]
    if target.team_store:  # the store's name for this target: one per CronJob
        env.append({"name": MACHINE_ENV, "value": k8s_machine(loop)})
    command = ["loopctl", *scheduled(loop)]
    if not loop.on_demand:  # a suspended CronJob's Jobs are made by hand: no slot
        # The Job's slot (DESIGN §20): the same for every pod of one Job, one
        # per scheduled Job. The scheduled-time annotation is readable only
        # through the API (RBAC); the Job's name, which the controller makes
        # from that time, reaches the pod through the downward API, and
        # Kubernetes expands $(VAR) in `command` itself: no shell.
        env.append({"name": JOB_ENV, "valueFrom": {"fieldRef": {"fieldPath": JOB_LABEL}}})
        command += ["--slot", f"k8s-job:{name}:$({JOB_ENV})"]
    container = {
        "name": "loopctl", "image": target.image,
        "command": command,
        "workingDir": K8S_WORKDIR, "env": env, "volumeMounts": _k8s_mounts(loop),
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}},
    }
    return {
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
    names = secret_names(loop, target.team_store)
    if names:
        if target.secrets_file:
            steps.append(f"kubectl create secret generic {secret} "
                         f"--from-env-file={shlex.quote(target.secrets_file)}")
        else:
            steps.append(f"kubectl create secret generic {secret} --from-env-file=FILE   "
                         f"# FILE holds {', '.join(k + '=...' for k in names)}; "
                         "`--secrets-file FILE` writes it (0600)")
    steps.append(f"kubectl apply -f {target.at(name + '.yaml')}")
    if loop.on_demand:
        steps.append(f'kubectl create job --from=cronjob/{name} "{name[:40]}-$(date +%s)"'
                     "   # one fire")
    return steps


def secrets_env_file(loop: LoopDef, environ: dict[str, str],
                     team_store: bool = False) -> tuple[str, list[str]]:
    """KEY=VALUE lines for `kubectl create secret --from-env-file`: values
    from the definition, else from this environment (the caller puts the
    home's store there as LOOPCTL_STORE); and the names missing."""
    lines, missing = [], []
    for key in secret_names(loop, team_store):
        value = loop.env.get(key)
        if value is None:
            value = environ.get(key)
        if value is None or "\n" in value:
            missing.append(key)
            continue
        lines.append(f"{key}={value}")
    return "".join(line + "\n" for line in lines), missing
