"""The Kubernetes export passes each Job's slot (issue 50 item 1, DESIGN
§20): the pod gets its Job's name through the downward API (no RBAC), the
command hands it to `run --scheduled --slot k8s-job:CRONJOB:JOBNAME`, and
loopctl serves the instant the CronJob controller put in that name. A second
pod of the same Job (a retry, a node lost) is refused with the run that took
the slot, exit 0; the next scheduled Job runs."""

from __future__ import annotations

import time

import pytest
import yaml

from conftest import CLI, agent_command
from export.simulator import K8sSimulator
from export.support import (
    SimFactory,
    export,
    make_sim_fixture,  # noqa: F401 - the make_sim fixture
    start,
)


def container_of(manifest: str) -> dict:
    cron_job = list(yaml.safe_load_all(manifest))[2]
    return cron_job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("schedule", [("--cron", "0 * * * *"), ("--every", "1h")])
def test_one_job_runs_once_however_many_pods_it_gets(cli: CLI, make_sim: SimFactory,
                                                     schedule: tuple[str, str]) -> None:
    start(cli, "kj", *schedule, "--command", agent_command("--print", "worked"))
    sim = make_sim("kj", "k8s")
    assert isinstance(sim, K8sSimulator)
    # A Job the controller scheduled an hour ago, on the hour.
    sim.job_name = f"loopctl-kj-{(int(time.time()) // 3600 - 1) * 60}"
    first, retry = sim.fire(), sim.fire()
    assert first.returncode == 0, first.describe()
    (record,) = sim.records()
    minutes = int(sim.job_name.rsplit("-", 1)[1])
    assert record["slot"] == "schedule:" + time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                         time.gmtime(minutes * 60))
    assert retry.returncode == 0, retry.describe()
    assert retry.stderr.strip().splitlines() == [
        f"loopctl: slot {record['due_at']} already ran: run {record['run_id']}"]
    sim.job_name = None  # the next scheduled Job, as its controller names it
    later = sim.fire()
    assert later.returncode == 0, later.describe()
    records = sim.records()
    assert len(records) == 2 and records[1]["slot"] != record["slot"], records


def test_the_export_reads_the_job_name_without_api_access(cli: CLI, tmp_path) -> None:
    start(cli, "kn", "--cron", "30 9 * * *", "--command", agent_command())
    (manifest,) = export(cli, "kn", "k8s", tmp_path / "out").values()
    container = container_of(manifest)
    assert container["command"][-2:] == ["--slot", "k8s-job:loopctl-kn:$(LOOPCTL_K8S_JOB)"]
    refs = [e for e in container["env"] if e["name"] == "LOOPCTL_K8S_JOB"]
    assert refs == [{"name": "LOOPCTL_K8S_JOB",
                     "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['job-name']"}}}]
    # No ServiceAccount token is needed: nothing asks for one.
    pod = list(yaml.safe_load_all(manifest))[2]["spec"]["jobTemplate"]["spec"]["template"]
    assert "serviceAccountName" not in pod["spec"]


def test_an_on_demand_loop_has_no_slot(cli: CLI, tmp_path) -> None:
    """Its Jobs are made by hand (`kubectl create job --from`), named freely."""
    start(cli, "od", "--on-demand", "--command", agent_command())
    (manifest,) = export(cli, "od", "k8s", tmp_path / "out").values()
    container = container_of(manifest)
    assert "--slot" not in container["command"]
    assert all("fieldRef" not in e.get("valueFrom", {}) for e in container["env"])


def this_hour_minus(hours: int) -> int:
    return (int(time.time()) // 3600 - hours) * 60


@pytest.mark.parametrize("slot, why", [
    ("k8s-job:loopctl-other:loopctl-other-{m}", "expected k8s-job:loopctl-ks:JOBNAME"),
    ("k8s-job:loopctl-ks", "expected k8s-job:loopctl-ks:JOBNAME"),
    ("k8s-job:loopctl-ks:", "is not a Job its CronJob scheduled"),      # no label set
    ("k8s-job:loopctl-ks:by-hand", "is not a Job its CronJob scheduled"),
    ("k8s-job:loopctl-ks:loopctl-ks-", "is not a Job its CronJob scheduled"),
    ("k8s-job:loopctl-ks:loopctl-ks-12a", "is not a Job its CronJob scheduled"),
    ("k8s-job:loopctl-ks:loopctl-ks-²", "is not a Job its CronJob scheduled"),
    ("k8s-job:loopctl-ks:loopctl-ks-1234567890123", "is not a Job its CronJob scheduled"),
    ("k8s-job:loopctl-ks:loopctl-ks-999999999999", "is not a Job its CronJob scheduled"),
    ("k8s-job:loopctl-ks:loopctl-ks-{off}", "not an instant of loop 'ks'"),  # :30
    ("k8s-job:loopctl-ks:loopctl-ks-{future}", "in the future"),
])
def test_a_slot_that_is_not_this_loops_job_is_refused(cli: CLI, slot: str, why: str) -> None:
    start(cli, "ks", "--cron", "0 * * * *", "--command", agent_command())
    m = this_hour_minus(1)
    given = slot.format(m=m, off=m + 30, future=this_hour_minus(-2))
    proc = cli("run", "ks", "--scheduled", "--slot", given)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and why in lines[0] and "Traceback" not in proc.stderr, lines
    assert cli.records("ks") == []
