"""Helpers shared by the export tests (tests/export/test_*.py): start a
loop, export it with `-o`, and the `make_sim` fixture that exports a loop to a
target and returns the simulator (simulator.py) that plays that target's
scheduler. Also the export options each target needs and a folder name with
odd characters.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import CLI
from export.simulator import (
    FAKE_BIN,
    CrontabSimulator,
    GithubSimulator,
    K8sSimulator,
    Simulator,
    SystemdSimulator,
)

TARGETS = ["crontab", "systemd", "k8s", "github"]
IMAGE = "registry.example/loopctl-agent:1.0"
INSTALL = "loopctl @ git+https://github.com/owner/loopctl@v1.0.0"
TARGET_ARGS = {"k8s": ["--image", IMAGE], "github": ["--install", INSTALL]}
SECRET = "sk-live-SECRET-VALUE-123"


def start(cli: CLI, name: str, *args: str, prompt: str = "do the work",
          env: dict[str, str] | None = None) -> None:
    if "--prompt-file" in args:
        cli("start", "--name", name, *args, env=env, check=0)
    else:
        cli("start", prompt, "--name", name, *args, env=env, check=0)


def export(cli: CLI, name: str, target: str, out: Path, *extra: str,
           env: dict[str, str] | None = None) -> dict[str, str]:
    """Export with -o; the files written, by name."""
    proc = cli("export", name, "--to", target, "-o", str(out), *TARGET_ARGS.get(target, []),
               *extra, env=env)
    assert proc.returncode == 0, proc.stderr
    return {p.name: p.read_text() for p in sorted(out.iterdir())}


SimFactory = Callable[..., Simulator]


@pytest.fixture(name="make_sim")
def make_sim_fixture(cli: CLI, tmp_path: Path) -> Iterator[SimFactory]:
    """Export NAME to TARGET and return the scheduler simulator for it."""
    made: list[Simulator] = []

    def build(name: str, target: str, secrets: dict[str, str] | None = None,
              extra_env: dict[str, str] | None = None, home: Path | None = None,
              **kwargs: Any) -> Simulator:
        index = len(made)
        # Exported from a shell where the agents are on PATH, as a user would.
        env = {"PATH": f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}"}
        if home:
            env["LOOPCTL_HOME"] = str(home)
        files = export(cli, name, target, tmp_path / f"export-{index}", env=env)
        scratch = tmp_path / f"sim-{index}"
        secrets = {"ANTHROPIC_API_KEY": "test-anthropic-key", **(secrets or {})}
        extra = extra_env or {}
        sim: Simulator
        if target == "crontab":
            sim = CrontabSimulator(name, scratch, extra, table=files[f"{name}.crontab"],
                                   home=home or cli.home)
        elif target == "systemd":
            sim = SystemdSimulator(name, scratch, extra,
                                   service=files[f"loopctl-{name}.service"],
                                   home=home or cli.home)
        elif target == "k8s":
            (manifest,) = files.values()
            sim = K8sSimulator(name, scratch, extra, manifest=manifest, secrets=secrets)
        else:
            (workflow,) = files.values()
            sim = GithubSimulator(name, scratch, extra, workflow=workflow, secrets=secrets,
                                  **kwargs)
        made.append(sim)
        return sim

    yield build
    for sim in made:
        if isinstance(sim, K8sSimulator):
            sim.cleanup()


def weird_dir(tmp_path: Path, label: str) -> Path:
    path = tmp_path / f"{label} 100% $HOME"
    path.mkdir()
    return path
