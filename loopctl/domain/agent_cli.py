"""Whether a `--command` runs a known AI agent CLI (DESIGN §14): such a loop
is the user's own program to loopctl, so `auto` leaves it unconfined, and
`start` says so. Pure: argv in, the agent's name out."""

from __future__ import annotations

import posixpath

TYPE_CHECKING = False
if TYPE_CHECKING:
    from loopctl.domain.model import LoopDef

# Every preset's binary (tests/agents/test_agent_cli_recognition.py keeps the two in step),
# the names their packages install under, and other agent CLIs.
AGENT_CLIS = frozenset({
    "claude", "codex", "gemini", "qwen", "opencode", "aider", "goose", "pi",
    "cursor-agent", "copilot", "crush", "amp", "claude-code", "gemini-cli", "qwen-code",
    "aider-chat", "opencode-ai", "cline", "kiro-cli", "droid", "auggie", "plandex",
    "openhands", "kimi"})
# Package names, by the CLI they install.
ALIASES = {"claude-code": "claude", "gemini-cli": "gemini", "qwen-code": "qwen",
           "aider-chat": "aider", "opencode-ai": "opencode"}
# Agent CLIs whose own sandbox is built with mount namespaces (bubblewrap),
# which no process in a Landlock domain may make: run unconfined, they get
# no scope-only domain, or their sandbox would fail instead.
OWN_SANDBOX = frozenset({"codex"})
# Programs that run the next word as the program (`env claude ...`).
LAUNCHERS = frozenset({"env", "nice", "nohup", "exec", "stdbuf", "time", "ionice",
                       "timeout", "npx", "bunx", "pnpx", "uvx", "pipx", "sudo", "doas"})
# Their options that take the next word as a value, and words before the
# program that are not options (`timeout 10 claude`).
VALUE_OPTIONS = {"env": {"-u", "-C", "-S", "--unset", "--chdir"},
                 "nice": {"-n", "--adjustment"}, "ionice": {"-c", "-n", "-p"},
                 "timeout": {"-s", "-k", "--signal", "--kill-after"},
                 "sudo": {"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U"},
                 "doas": {"-u", "-C"}, "npx": {"-p", "--package"}}
POSITIONALS = {"timeout": 1, "pipx": 1}  # the duration; `run`
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "fish"})
MAX_DEPTH = 4  # `sh -c 'env npx claude'`: a few layers, never a loop


def agent_cli(argv: list[str], depth: int = 0) -> str | None:
    """The agent CLI `argv` runs (`claude`), or None. Looks through
    launchers (`env`, `npx`, `VAR=value`), options before the program,
    package names (`@anthropic-ai/claude-code@1.0`) and `sh -c 'CMD'`."""
    words = list(argv)
    while words and depth <= MAX_DEPTH:
        name = _program_name(words[0])
        if name in AGENT_CLIS:
            return ALIASES.get(name, name)
        if name in SHELLS:
            script = _shell_script(words[1:])
            return None if script is None else agent_cli(script.split(), depth + 1)
        if name not in LAUNCHERS and not ("=" in words[0] and not words[0].startswith("-")):
            return None
        words = _after_launcher(name, words[1:])
        depth += 1
    return None


def _program_name(word: str) -> str:
    """`/usr/bin/claude` -> claude; `@openai/codex@0.5` -> codex."""
    base = posixpath.basename(word.rstrip("/")) if not word.startswith("@") \
        else word.split("/", 1)[-1]
    if "@" in base[1:]:
        base = base[: base.index("@", 1)]
    return base.lower()


def _after_launcher(launcher: str, rest: list[str]) -> list[str]:
    """The words from the launched program on: its options (with their
    values), `VAR=value` and positionals such as `timeout`'s duration."""
    out = list(rest)
    takes_value = VALUE_OPTIONS.get(launcher, set())
    positionals = POSITIONALS.get(launcher, 0)
    while out:
        word = out[0]
        if word in takes_value:
            out = out[2:]
        elif word.startswith("-") or ("=" in word and not word.startswith("@")):
            out = out[1:]
        elif positionals:
            positionals -= 1
            out = out[1:]
        else:
            break
    return out


def _shell_script(rest: list[str]) -> str | None:
    for i, word in enumerate(rest):
        if word.startswith("-") and "c" in word[1:] and not word.startswith("--"):
            return rest[i + 1] if i + 1 < len(rest) else None
    return None


def is_agent(loop: LoopDef) -> bool:
    """An AI agent preset (not `shell`, not a `--command`). Here, not in
    agents.presets, so that a run of a `--command` loop never loads the
    presets and their readers."""
    return not loop.command and (loop.agent or "shell") != "shell"
