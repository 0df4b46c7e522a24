"""Issue 38 item 9: `loopctl completion bash|zsh|fish` prints the script
completions/ ships (for venv and pipx installs, whose `share/` no shell
searches), and the scripts complete loop names, target names and the values
of --sandbox and --fallback-agent, asked of the real bash and fish."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CLI

ROOT = Path(__file__).resolve().parents[2]  # the repository
BIN = os.path.dirname(sys.executable)


def shell_env() -> dict[str, str]:
    return dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"])


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_the_shipped_script(cli: CLI, shell: str) -> None:
    proc = cli("completion", shell, check=0)
    assert proc.stdout == (ROOT / "completions" / f"loopctl.{shell}").read_text()


def test_completion_of_an_unknown_shell_is_one_line_and_exit_2(cli: CLI) -> None:
    proc = cli("completion", "tcsh", check=2)
    assert proc.stdout == "" and proc.stderr.count("\n") == 1 and "bash, zsh or fish" in proc.stderr


def with_loops(cli: CLI) -> None:
    (cli.home).mkdir(parents=True, exist_ok=True)
    cli("start", "--name", "alpha", "--every", "1h", "--", "echo a", check=0)
    cli("start", "--name", "beta", "--every", "1h", "--", "echo b", check=0)
    loops = cli.home / "loops.yaml"
    loops.write_text("notify_targets:\n  oncall: json://127.0.0.1:9/\n" + loops.read_text())


def bash_complete(cli: CLI, words: list[str]) -> list[str]:
    script = (f'eval "$(loopctl completion bash)"\n'
              f"COMP_WORDS=({' '.join(repr(w) for w in words)}); "
              f"COMP_CWORD={len(words) - 1}; _loopctl; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                          env=shell_env(), check=True)
    return [line for line in proc.stdout.splitlines() if line]


def fish_complete(line: str) -> list[str]:
    proc = subprocess.run(["fish", "-c", f"loopctl completion fish | source; complete -C {line!r}"],
                          capture_output=True, text=True, env=shell_env(), check=True)
    return sorted(row.split("\t")[0] for row in proc.stdout.splitlines())


def test_bash_completes_names_targets_and_values(cli: CLI) -> None:
    with_loops(cli)
    assert bash_complete(cli, ["loopctl", "trigger", ""]) == ["alpha", "beta"]
    assert bash_complete(cli, ["loopctl", "notify", "test", "--loop", ""]) == ["alpha", "beta"]
    assert bash_complete(cli, ["loopctl", "doctor", "--notify", ""]) == ["oncall"]
    assert bash_complete(cli, ["loopctl", "start", "--sandbox", ""]) == ["auto", "on", "off"]
    assert "claude" in bash_complete(cli, ["loopctl", "update", "--fallback-agent", ""])
    assert bash_complete(cli, ["loopctl", "completion", "f"]) == ["fish"]


@pytest.mark.skipif(not shutil.which("fish"), reason="fish not installed")
def test_fish_completes_names_targets_and_values(cli: CLI) -> None:
    with_loops(cli)
    assert fish_complete("loopctl trigger ") == ["alpha", "beta"]
    assert fish_complete("loopctl notify test --loop ") == ["alpha", "beta"]
    assert fish_complete("loopctl doctor --notify ") == ["oncall"]
    assert fish_complete("loopctl start --sandbox ") == ["auto", "off", "on"]
    assert "codex" in fish_complete("loopctl start --fallback-agent ")
