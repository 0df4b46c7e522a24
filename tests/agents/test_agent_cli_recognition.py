"""`--command` wrapping an agent CLI runs unconfined under `auto` (DESIGN
§14): `start` and `update` say so, and that `--sandbox on` confines it.
The recognition itself is pure (loopctl/domain/agent_cli.py)."""

from __future__ import annotations

import pytest

from conftest import CLI
from loopctl.agents.presets import PRESETS
from loopctl.domain.agent_cli import AGENT_CLIS, agent_cli

WARNING = "an agent CLI, unconfined"


@pytest.mark.parametrize("argv, found", [
    (["claude", "-p", "--dangerously-skip-permissions", "{prompt}"], "claude"),
    (["/usr/local/bin/codex", "exec", "{prompt}"], "codex"),
    (["env", "FOO=1", "-u", "BAR", "gemini", "-p", "x"], "gemini"),
    (["npx", "-y", "@anthropic-ai/claude-code@1.0.3", "-p", "x"], "claude"),
    (["pipx", "run", "aider-chat", "--yes"], "aider"),
    (["sh", "-c", "cd src && opencode run hi"], None),  # only the script's first program
    (["bash", "-lc", "qwen -p hi"], "qwen"),
    (["nice", "-n", "10", "goose", "run"], "goose"),
    (["python3", "claude.py"], None),
    (["./run-tests.sh"], None),
    (["claude-wrapper"], None),
    (["sh", "-c"], None),
    (["env"] * 50, None),
    ([], None),
])
def test_agent_clis_are_recognised_through_launchers(argv: list[str], found: str | None) -> None:
    assert agent_cli(argv) == found


def test_every_preset_binary_is_a_known_agent_cli() -> None:
    assert {p.binary for name, p in PRESETS.items() if name != "shell"} <= AGENT_CLIS


def test_start_and_update_warn_about_an_agent_cli_under_auto(cli: CLI) -> None:
    command = "claude -p --dangerously-skip-permissions {prompt}"
    started = cli("start", "p", "--name", "wrapped", "--every", "1h", "--command", command,
                  check=0)
    assert WARNING in started.stderr and "--sandbox on confines it" in started.stderr
    assert WARNING not in cli("update", "wrapped", "--sandbox", "on", check=0).stderr
    assert WARNING in cli("update", "wrapped", "--sandbox", "auto", check=0).stderr
    on = cli("start", "p", "--name", "boxed", "--every", "1h", "--command", command,
             "--sandbox", "on", check=0)
    assert WARNING not in on.stderr
    own = cli("start", "p", "--name", "own", "--every", "1h", "--command", "make test",
              check=0)
    assert WARNING not in own.stderr
