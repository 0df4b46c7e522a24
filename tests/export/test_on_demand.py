"""Exports of gated and `--on-demand` loops (DESIGN §17), checked by the real
validators: the gate travels with the definition and runs on the target;
an on-demand loop is a service without a timer, a suspended CronJob, a
workflow_dispatch + repository_dispatch workflow with the payload as input."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import CLI, agent_command, loopctl_argv, tool

TARGET_ARGS = {"k8s": ["--image", "registry.example/loopctl-agent:1.0"],
               "github": ["--install", "loopctl @ git+https://github.com/owner/loopctl@v1.0.0"]}


@pytest.fixture
def loops(cli: CLI, tmp_path: Path) -> Path:
    calls = tmp_path / "calls.jsonl"
    cli("start", "p", "--name", "od", "--on-demand", "--if", "test -e ./go",
        "--command", agent_command("--record", str(calls)), check=0)
    return calls


def export(cli: CLI, target: str, out: Path) -> tuple[list[Path], str]:
    proc = cli("export", "od", "--to", target, "-o", str(out), *TARGET_ARGS.get(target, []))
    assert proc.returncode == 0, proc.stderr
    return sorted(out.iterdir()), proc.stdout + proc.stderr


def test_crontab_refuses_an_on_demand_loop(cli: CLI, loops: Path) -> None:
    proc = cli("export", "od", "--to", "crontab")
    assert proc.returncode == 2 and "--on-demand" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_systemd_is_a_service_without_a_timer(cli: CLI, tmp_path: Path, loops: Path) -> None:
    files, said = export(cli, "systemd", tmp_path / "units")
    assert [f.suffix for f in files] == [".service"]
    assert "systemctl --user start loopctl-od.service" in said
    proc = subprocess.run([tool("systemd-analyze"), "verify", "--man=no", str(files[0])],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_k8s_is_a_suspended_cronjob_with_the_create_job_line(
        cli: CLI, tmp_path: Path, loops: Path) -> None:
    (path,), said = export(cli, "k8s", tmp_path / "k8s")
    config_map, _, cron_job = list(yaml.safe_load_all(path.read_text()))
    assert cron_job["spec"]["suspend"] is True
    assert "kubectl create job --from=cronjob/loopctl-od " in said
    definition = yaml.safe_load(config_map["data"]["loops.yaml"])["loops"]["od"]
    assert definition["if"] == ["test", "-e", "./go"] and definition["on_demand"] is True
    proc = subprocess.run([tool("kubernetes-validate"), "--strict", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_github_is_dispatched_with_the_payload_as_an_input(
        cli: CLI, tmp_path: Path, loops: Path) -> None:
    (path,), said = export(cli, "github", tmp_path / "gh")
    flow = yaml.safe_load(path.read_text())
    events = flow[True] if True in flow else flow["on"]
    assert "schedule" not in events
    assert events["workflow_dispatch"]["inputs"]["payload"]["type"] == "string"
    assert events["repository_dispatch"]["types"] == ["loopctl-od"]
    assert "gh workflow run" in said
    [step] = [s for s in flow["jobs"]["run"]["steps"] if s.get("name") == "Run od"]
    assert "${{" not in step["run"]  # the payload comes in through env, as data
    proc = subprocess.run([tool("check-jsonschema"), "--builtin-schema",
                           "vendor.github-workflows", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_github_step_triggers_with_the_payload_and_the_gate_runs_there(
        cli: CLI, tmp_path: Path, loops: Path) -> None:
    """Play the runner: the step's script, with `loopctl` on PATH, the
    payload in $PAYLOAD, in a checkout where the gate finds work."""
    (path,), _ = export(cli, "github", tmp_path / "gh")
    flow = yaml.safe_load(path.read_text())
    [step] = [s for s in flow["jobs"]["run"]["steps"] if s.get("name") == "Run od"]
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "loopctl").write_text("#!/bin/sh\nexec " + " ".join(loopctl_argv()) + ' "$@"\n')
    (shim / "loopctl").chmod(0o700)
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    env = dict(os.environ, PATH=f"{shim}:{os.environ['PATH']}", RUNNER_TEMP=str(tmp_path),
               PAYLOAD="--yolo {prompt} from a dispatch")

    def fire() -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-e", "-c", step["run"]], env=env, cwd=checkout,
                              capture_output=True, text=True, timeout=60)

    # Played against this home, the gate runs in the loop's cwd and finds
    # no ./go there: the fire is skipped, and no agent starts.
    assert fire().returncode == 0
    assert [r["outcome"] for r in cli.records("od")] == ["skipped"]
    assert not loops.exists()
    cwd = Path(cli.json("show", "od")["definition"]["cwd"])
    (cwd / "go").touch()
    try:
        proc = fire()
    finally:
        (cwd / "go").unlink()
    assert proc.returncode == 0, proc.stderr
    last = cli.records("od")[-1]
    assert (last["outcome"], last["trigger"]) == ("ok", "api")
    trigger_file = loops.read_text().split('"LOOPCTL_TRIGGER_FILE": "')[1].split('"')[0]
    assert Path(trigger_file).read_text() == "--yolo {prompt} from a dispatch"
