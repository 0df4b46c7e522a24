"""`export --to github` installs the agent CLI the loop's preset runs,
pinned (issue 51, item 15: the workflow failed as exported with `agent not
found`): the version tests/e2e runs, or an exact `--agent-install`; a preset
without a pin is refused, never installed unpinned. Every workflow here also
passes actionlint (the `cli` fixture lints each GitHub export)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e.common import VERSIONS

from conftest import CLI, agent_command
from export.support import INSTALL, start
from loopctl.agents.pins import TESTED, npm_package

PIN = ["--install", INSTALL]


def workflow(cli: CLI, name: str, *extra: str) -> list[dict[str, Any]]:
    proc = cli("export", name, "--to", "github", *PIN, *extra)
    assert proc.returncode == 0, proc.stderr
    steps: list[dict[str, Any]] = yaml.safe_load(proc.stdout)["jobs"]["run"]["steps"]
    return steps


def installs(steps: list[dict[str, Any]]) -> list[str]:
    return [s["env"]["AGENT_INSTALL"] for s in steps if "AGENT_INSTALL" in s.get("env", {})]


def test_the_pins_are_the_versions_the_end_to_end_tests_run() -> None:
    assert TESTED == VERSIONS
    assert all(npm_package(preset) for preset in TESTED)


@pytest.mark.parametrize("preset", sorted(VERSIONS))
def test_each_tested_preset_is_installed_pinned_before_the_run(cli: CLI, preset: str) -> None:
    start(cli, "gh", "--every", "1h", "--agent", preset)
    steps = workflow(cli, "gh")
    assert installs(steps) == [f"{npm_package(preset)}@{VERSIONS[preset]}"]
    names = [s.get("name") or s.get("uses") for s in steps]
    setup = names.index("actions/setup-node@v4")
    install = names.index(f"Install the {preset} CLI (pinned)")
    run = next(i for i, s in enumerate(steps) if "loopctl run" in s.get("run", ""))
    assert setup < install < run


def test_the_spec_reaches_npm_as_one_argument(cli: CLI, tmp_path: Path) -> None:
    start(cli, "gh", "--every", "1h", "--agent", "claude")
    (step,) = [s for s in workflow(cli, "gh") if "AGENT_INSTALL" in s.get("env", {})]
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "npm").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$OUT"\n')
    (fake / "npm").chmod(0o755)
    out = tmp_path / "argv"
    subprocess.run(["bash", "-eo", "pipefail", "-c", step["run"]], check=True, env={
        "PATH": f"{fake}:/usr/bin:/bin", "OUT": str(out), **step["env"]})
    assert out.read_text().splitlines() == ["install", "-g",
                                            f"@anthropic-ai/claude-code@{VERSIONS['claude']}"]


def test_a_preset_without_a_pin_is_refused_then_takes_agent_install(cli: CLI) -> None:
    start(cli, "gh", "--every", "1h", "--agent", "pi")
    proc = cli("export", "gh", "--to", "github", *PIN)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    (line,) = proc.stderr.strip().splitlines()
    assert "no pinned install of the pi CLI" in line
    assert "--agent-install @mariozechner/pi-coding-agent@VERSION" in line
    spec = "@mariozechner/pi-coding-agent@0.9.1"
    assert installs(workflow(cli, "gh", "--agent-install", spec)) == [spec]
    assert installs(workflow(cli, "gh", "--agent-install", "aider-chat==0.86.1")) == [
        "aider-chat==0.86.1"]


@pytest.mark.parametrize("spec", [
    "@anthropic-ai/claude-code", "@anthropic-ai/claude-code@latest", "claude-code@^2.1.0",
    "x@1.2.3; curl evil | sh", "$(id)@1.0.0", "--registry=http://evil@1.0.0",
    "aider-chat>=0.86", "a" * 300 + "@1.0.0", "x@1.2.3\nrun: evil"])
def test_a_loose_or_hostile_agent_install_is_refused(cli: CLI, spec: str) -> None:
    start(cli, "gh", "--every", "1h", "--agent", "claude")
    proc = cli("export", "gh", "--to", "github", *PIN, "--agent-install", spec)
    assert proc.returncode == 2, proc.stdout
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("loopctl: error: bad --agent-install"), line


def test_shell_and_command_loops_install_nothing_and_agent_install_is_github_only(
        cli: CLI) -> None:
    start(cli, "sh", "--every", "1h", "--agent", "shell", prompt="echo hi")
    start(cli, "cmd", "--every", "1h", "--command", agent_command())
    assert installs(workflow(cli, "sh")) == [] and installs(workflow(cli, "cmd")) == []
    proc = cli("export", "cmd", "--to", "crontab", "--agent-install", "x@1.0.0")
    assert proc.returncode == 2 and "--agent-install is for --to github" in proc.stderr
