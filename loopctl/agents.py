"""How to launch each agent headlessly: argv and where the prompt goes.

The `shell` preset runs the prompt with `sh -c` (the only place loopctl uses
a shell, and only because the user chose it). `command` loops are split like
a shell but run without one. The other presets build each agent CLI's own
headless invocation with its safe unattended defaults.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from loopctl.model import LoopDef

P = "{prompt}"
DECIDE_TOOL = "Bash(loopctl decide:*)"


@dataclass(frozen=True)
class Preset:
    name: str
    binary: str
    argv: tuple[str, ...]
    model_flag: str | None = "--model"


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("shell", "sh", ("sh", "-c", P), None),
    Preset("claude", "claude", ("claude", "-p", P, "--output-format", "json",
                                "--allowedTools", DECIDE_TOOL)),
    Preset("codex", "codex", ("codex", "exec", "--json", "--sandbox", "workspace-write",
                              "--skip-git-repo-check", P)),
    Preset("gemini", "gemini", ("gemini", "-p", P, "--output-format", "json",
                                "--approval-mode", "auto_edit")),
    Preset("qwen", "qwen", ("qwen", "-p", P, "--output-format", "json")),
    Preset("opencode", "opencode", ("opencode", "run", "--format", "json", P)),
    Preset("aider", "aider", ("aider", "--yes-always", "--message", P)),
    Preset("goose", "goose", ("goose", "run", "-t", P)),
    Preset("pi", "pi", ("pi", "-p", P, "--mode", "json")),
    Preset("cursor", "cursor-agent", ("cursor-agent", "-p", P, "--output-format", "json")),
    Preset("copilot", "copilot", ("copilot", "-p", P)),
    Preset("crush", "crush", ("crush", "run", P)),
    Preset("amp", "amp", ("amp", "-x", P)),
)}


def _fill(arg: str, values: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), arg)


def wants_envelope(loop: LoopDef) -> bool:
    """Presets get the envelope; `shell`, `--command` and `--raw` do not."""
    return not loop.raw and not loop.command and (loop.agent or "shell") != "shell"


def build_argv(loop: LoopDef, prompt: str, prompt_path: str, run_id: str,
               resume_session: str | None = None) -> tuple[list[str], str | None]:
    """The argv to run and the text for its stdin (None: stdin is /dev/null)."""
    values = {"prompt": prompt, "prompt_file": prompt_path, "loop": loop.name,
              "run_id": run_id}
    if loop.command:
        template = list(loop.command)
        wants_prompt = any(re.search(r"\{prompt(_file)?\}", a) for a in template)
        argv = [_fill(a, values) for a in template] + list(loop.agent_args)
        return argv, None if wants_prompt else prompt
    preset = PRESETS[loop.agent or "shell"]
    argv = [_fill(a, values) for a in preset.argv]
    if loop.model and preset.model_flag:
        argv += [preset.model_flag, loop.model]
    return argv + list(loop.agent_args), None


def binary(loop: LoopDef) -> str:
    if loop.command:
        return loop.command[0]
    return PRESETS[loop.agent or "shell"].binary
