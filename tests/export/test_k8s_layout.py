"""The Kubernetes export lays out a pod where the sandbox works (DESIGN
§9, §14): its HOME is not the working directory or above it. The exported
container's command runs here, in a folder laid out as the pod's (every
volume mount, the working directory, the env), and its run is confined:
`--sandbox on` succeeds there.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import CLI, loopctl_argv
from export.simulator import expand
from loopctl.engine.containment import sandbox


def exported(cli: CLI, out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    proc = cli("export", "boxed", "--to", "k8s", "-o", str(out),
               "--image", "registry.example/loopctl-agent:1.0")
    assert proc.returncode == 0, proc.stderr
    (path,) = out.iterdir()
    config_map, _, cron_job = yaml.safe_load_all(path.read_text())
    pod = cron_job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return config_map, pod


def lay_out(pod: dict[str, Any], config_map: dict[str, Any], root: Path) -> dict[str, Any]:
    """The pod's container, its paths moved under `root`: each mount made
    (a ConfigMap file written where its subPath goes, a volume a folder)."""
    (container,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in container["volumeMounts"]:
        where = root / mount["mountPath"].lstrip("/")
        if "configMap" in volumes[mount["name"]]:
            where.parent.mkdir(parents=True, exist_ok=True)
            where.write_text(config_map["data"][mount["subPath"]])
        else:
            where.mkdir(parents=True, exist_ok=True)
    return container


def test_the_exported_container_runs_a_confined_loop(cli: CLI, tmp_path: Path) -> None:
    if sandbox.available()[1] is not None:
        pytest.skip("no Landlock here")
    script = "echo ran > done.txt; cat \"$HOME/.profile\" > seen.txt 2>/dev/null; exit 0"
    cli("start", "p", "--name", "boxed", "--every", "1h", "--sandbox", "on",
        "--command", shlex.join(["sh", "-c", script]), check=0)
    config_map, pod = exported(cli, tmp_path / "k8s")
    root = tmp_path / "pod"
    container = lay_out(pod, config_map, root)
    env = {e["name"]: str(root / e["value"].lstrip("/")) for e in container["env"]
           if "value" in e and e["value"].startswith("/")}
    home, workdir = Path(env["HOME"]), root / container["workingDir"].lstrip("/")
    (home / ".profile").write_text("the pod's own dotfile\n")  # the home: not the agent's
    # The Job's name, which the downward API gives the pod (an --every
    # loop's Job serves the CronJob's time as it is).
    env["LOOPCTL_K8S_JOB"] = f"loopctl-boxed-{int(time.time()) // 60 - 60}"
    command = [expand(word, env) for word in container["command"]]
    assert command[0] == "loopctl"
    argv = loopctl_argv(*command[1:])
    proc = subprocess.run(argv, cwd=workdir, env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, (shlex.join(argv), proc.stdout, proc.stderr)
    assert (workdir / "done.txt").read_text() == "ran\n"
    assert (workdir / "seen.txt").read_text() == ""  # the home stays out of reach
    runs = Path(env["LOOPCTL_HOME"]) / "state" / "runs" / "boxed"
    log = next(runs.glob("*.log")).read_text()
    assert "# loopctl: sandbox: landlock ABI " in log, log
    # HOME is neither the working directory nor above it, nor below it.
    assert not (str(home) + "/").startswith(str(workdir) + "/")
    assert not (str(workdir) + "/").startswith(str(home) + "/")
