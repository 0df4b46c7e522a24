"""How to drive each agent headlessly, and how to read what it said.

A preset is data: the argv template (with `{prompt}`), where the prompt goes,
the model/resume/bypass flags, and which reader understands its output. The
flags were checked against each CLI's `--help` (see the README's agents
table). The `shell` preset runs the prompt with `sh -c`: the only place
loopctl uses a shell, and only because the user chose it. `--command` loops
are split like a shell but run without one.
"""

from __future__ import annotations

from loopctl.agents.command import command_argv, fill, values_for
from loopctl.agents.readers import READERS, Reading, read_text
from loopctl.domain.agent_cli import is_agent
from loopctl.domain.model import LoopDef
from loopctl.domain.untrusted import session_id
from loopctl.fast.data_class import factory, record

P = "{prompt}"
DECIDE_RULE = "Bash(loopctl decide *)"
GEMINI_DECIDE_RULE = "run_shell_command(loopctl decide)"


@record(frozen=True)
class Preset:
    name: str
    binary: str
    # Everything before the prompt; `{prompt}` marks an argument holding it.
    argv: tuple[str, ...]
    # Where the prompt goes: "arg" (the `{prompt}` slot), or "stdin".
    prompt_via: str = "arg"
    # Arguments that stay last, after options (`-` for stdin, `-i -`).
    last: tuple[str, ...] = ()
    model_flag: tuple[str, ...] = ("--model",)
    resume: tuple[str, ...] = ()  # args with `{session}`, inserted before the prompt
    bypass: tuple[str, ...] = ()  # --yolo: the agent's own full-bypass flag(s)
    drop_for_bypass: tuple[str, ...] = ()  # safe-default args the bypass replaces
    env: dict[str, str] = factory(dict)
    reader: str = "text"
    safe_default: str = ""
    warning: str | None = None
    version_args: tuple[str, ...] = ("--version",)
    api_key_env: str | None = None  # what exports take from a secret
    # When loopctl's sandbox confines the run (DESIGN §14): args replaced.
    confined_swap: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
    # How far the decision protocol is proven: end to end with the real CLI
    # (tests/e2e/test_*.py, against a stub of its model API), or only its flags.
    verified: str = "flags from --help"


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("shell", "sh", ("sh", "-c", "--", P), model_flag=(),
           safe_default="runs the prompt with sh -c",
           version_args=(), verified="not an agent: no envelope"),
    Preset("claude", "claude",
           ("claude", "-p", "--output-format", "json", "--permission-mode", "acceptEdits",
            f"--allowedTools={DECIDE_RULE}", "--", P),
           resume=("--resume", "{session}"),
           bypass=("--dangerously-skip-permissions",),
           drop_for_bypass=("--permission-mode", "acceptEdits"),
           reader="claude",
           safe_default="--permission-mode acceptEdits; only `loopctl decide` pre-approved",
           warning=None,
           api_key_env="ANTHROPIC_API_KEY",
           verified="end to end with claude 2.1.332: decide, decision line, session; "
                    "chained command refused"),
    Preset("codex", "codex",
           # Codex runs commands as `bash -lc`, whose /etc/profile drops the
           # shim from PATH, and its sandbox refuses the decision file: allow
           # exactly that folder, keep the sandbox otherwise as it is.
           ("codex", "exec", "--sandbox", "workspace-write", "{resume}", "--json",
            "--skip-git-repo-check", "-c", "allow_login_shell=false",
            "-c", "sandbox_workspace_write.writable_roots=[{decision_dir_toml}]"),
           prompt_via="stdin", last=("-",), resume=("resume", "{session}"),
           bypass=("--dangerously-bypass-approvals-and-sandbox",),
           drop_for_bypass=("--sandbox", "workspace-write"),
           # Confined by loopctl, codex 0.171's own sandbox cannot start: its
           # bubblewrap needs mount(2), which Landlock denies to the domain,
           # and its Landlock fallback refuses to restrict files without
           # bubblewrap. loopctl's sandbox then bounds its commands instead.
           confined_swap=(("--sandbox", "workspace-write"), ("--sandbox", "danger-full-access")),
           reader="codex", safe_default="--sandbox workspace-write",
           api_key_env="OPENAI_API_KEY",
           verified="end to end with codex 0.171.0: decide, decision line, session "
                    "(no prefix rules: the sandbox is the guard)"),
    Preset("gemini", "gemini",
           # auto_edit does not even offer the shell tool; allow it for exactly
           # `loopctl decide` (gemini refuses chained commands under the rule).
           ("gemini", "--output-format", "json", "--approval-mode", "auto_edit",
            "--skip-trust", f"--allowed-tools={GEMINI_DECIDE_RULE}", f"--prompt={P}"),
           model_flag=("-m",), resume=("--resume", "{session}"),
           bypass=("--approval-mode", "yolo"), drop_for_bypass=("--approval-mode", "auto_edit"),
           reader="gemini", safe_default="--approval-mode auto_edit",
           api_key_env="GEMINI_API_KEY",
           verified="end to end with gemini 0.61.0: decide, decision line, session; "
                    "chained command refused"),
    Preset("qwen", "qwen",
           ("qwen", "--output-format", "json", "--approval-mode", "auto-edit",
            f"--allowed-tools={GEMINI_DECIDE_RULE}", f"--prompt={P}"),
           model_flag=("-m",), resume=("--resume", "{session}"),
           bypass=("--approval-mode", "yolo"), drop_for_bypass=("--approval-mode", "auto-edit"),
           reader="claude", safe_default="--approval-mode auto-edit",
           api_key_env="OPENAI_API_KEY",
           verified="end to end with qwen 0.24.4: decide, decision line; chained command "
                    "refused"),
    Preset("opencode", "opencode", ("opencode", "run", "--format", "json", "--", P),
           model_flag=("-m",), resume=("--session", "{session}"), bypass=("--auto",),
           reader="opencode", safe_default="opencode's own permission rules",
           warning="opencode allows edits and shell commands by default; restrict it in "
                   "its config",
           api_key_env="ANTHROPIC_API_KEY",
           verified="end to end with opencode 1.18.33: decide, decision line, session "
                    "(shell allowed by default: no rule to test)"),
    Preset("aider", "aider",
           ("aider", "--yes-always", "--no-auto-commits", "--no-check-update", f"--message={P}"),
           safe_default="--yes-always (needed unattended), --no-auto-commits",
           warning="aider --yes-always accepts every confirmation, including shell commands",
           api_key_env="ANTHROPIC_API_KEY"),
    Preset("goose", "goose", ("goose", "run", "--output-format", "json", "-q"),
           prompt_via="stdin", last=("-i", "-"), env={"GOOSE_MODE": "smart_approve"},
           reader="goose",
           safe_default="GOOSE_MODE=smart_approve",
           api_key_env="ANTHROPIC_API_KEY", verified="flags from docs"),
    Preset("pi", "pi", ("pi", "-p", "--mode", "json"), prompt_via="stdin",
           resume=("--session", "{session}"), reader="pi",
           safe_default="none: pi has no permission system",
           warning="pi runs bash, edit and write without asking; restrict with --agent-arg "
                   "--tools=...",
           api_key_env="ANTHROPIC_API_KEY"),
    Preset("cursor", "cursor-agent",
           ("cursor-agent", "-p", "--output-format", "json", "--trust", "--", P),
           resume=("--resume", "{session}"), bypass=("--force",), reader="claude",
           safe_default="no --force: edits are proposed, not applied",
           api_key_env="CURSOR_API_KEY", verified="flags from docs"),
    Preset("copilot", "copilot",
           ("copilot", "--output-format", "json", "--allow-all-tools", "--no-auto-update",
            f"--prompt={P}"),
           resume=("--resume={session}",), bypass=("--allow-all",), reader="copilot",
           safe_default="--allow-all-tools (required headless); paths and URLs still asked",
           warning="copilot needs --allow-all-tools to run unattended",
           api_key_env="COPILOT_GITHUB_TOKEN"),
    Preset("crush", "crush", ("crush", "run", "--quiet", "--", P),
           resume=("--session", "{session}"), bypass=("--yolo",),
           safe_default="none: crush run approves every tool",
           warning="crush run auto-approves every tool call",
           api_key_env="ANTHROPIC_API_KEY", verified="flags from docs"),
    Preset("amp", "amp", ("amp", "{resume}", "--stream-json", "-x", P), model_flag=(),
           resume=("threads", "continue", "{session}"), bypass=("--dangerously-allow-all",),
           reader="claude", safe_default="amp's own permission settings",
           api_key_env="AMP_API_KEY"),
)}

# How to install each preset's CLI (its maintainers' documented command): named
# where a missing CLI is found (`start`, `agents`, `doctor`, the run's reason).
INSTALL: dict[str, str] = {
    "claude": "npm install -g @anthropic-ai/claude-code",
    "codex": "npm install -g @openai/codex",
    "gemini": "npm install -g @google/gemini-cli",
    "qwen": "npm install -g @qwen-code/qwen-code",
    "opencode": "npm install -g opencode-ai",
    "aider": "python -m pip install aider-install && aider-install",
    "goose": "curl -fsSL https://github.com/block/goose/releases/download/stable/"
             "download_cli.sh | bash",
    "pi": "npm install -g @mariozechner/pi-coding-agent",
    "cursor": "curl https://cursor.com/install -fsS | bash",
    "copilot": "npm install -g @github/copilot",
    "crush": "npm install -g @charmland/crush",
    "amp": "npm install -g @sourcegraph/amp",
}


def install_hint(preset: str | None) -> str:
    """`; install it: `npm install -g ...`` for a preset with an install
    command, else nothing (the shell preset's `sh` comes with the system)."""
    command = INSTALL.get(preset or "shell")
    return f"; install it: `{command}`" if command else ""


# Presets whose output carries the run's cost in dollars (their readers:
# claude's total_cost_usd, goose's metadata.cost_usd, pi's usage.cost).
REPORTS_COST = ("claude", "goose", "pi")


def reports_cost(loop: LoopDef) -> bool:
    return not loop.command and (loop.agent or "shell") in REPORTS_COST


def wants_envelope(loop: LoopDef) -> bool:
    """Presets get the envelope; `shell`, `--command` and `--raw` do not."""
    return is_agent(loop) and not loop.raw


def build_argv(loop: LoopDef, prompt: str, prompt_path: str, run_id: str,
               resume_session: str | None = None,
               decision_dir: str = "DECISION_DIR") -> tuple[list[str], str | None]:
    """The argv to run and the text for its stdin (None: stdin is /dev/null)."""
    values = values_for(loop, prompt, prompt_path, run_id, decision_dir)
    if loop.command:
        return command_argv(loop, values)
    preset = PRESETS[loop.agent or "shell"]
    head, tail = _split_at_prompt(list(preset.argv))
    if loop.yolo and preset.bypass:
        head = _without(head, preset.drop_for_bypass) + list(preset.bypass)
    if loop.model and preset.model_flag:
        head += [*preset.model_flag, loop.model]
    head += list(loop.agent_args)
    # The id came from the agent's output: never let it become a flag.
    resume_session = session_id(resume_session)
    resume = [a.replace("{session}", resume_session) for a in preset.resume] \
        if resume_session and preset.resume else []
    if "{resume}" in head:
        at = head.index("{resume}")
        head[at:at + 1] = resume
    else:
        head += resume
    argv = [fill(a, values) for a in head + tail] + list(preset.last)
    return argv, prompt if preset.prompt_via == "stdin" else None


def _split_at_prompt(argv: list[str]) -> tuple[list[str], list[str]]:
    """Options go before the prompt argument (and before a `--` that guards
    a prompt starting with `-`); the prompt stays last."""
    for i, arg in enumerate(argv):
        if arg == P:
            # `--` or the flag that takes the prompt (`-x PROMPT`) stays with it.
            start = i - 1 if i > 0 and argv[i - 1].startswith("-") else i
            return argv[:start], argv[start:]
        if P in arg:
            return argv[:i], argv[i:]
    return argv, []


def _without(argv: list[str], pair: tuple[str, ...]) -> list[str]:
    if not pair:
        return argv
    for i in range(len(argv) - len(pair) + 1):
        if tuple(argv[i:i + len(pair)]) == pair:
            return argv[:i] + argv[i + len(pair):]
    return argv


def binary(loop: LoopDef) -> str:
    if loop.command:
        return loop.command[0]
    return PRESETS[loop.agent or "shell"].binary


def env_for(loop: LoopDef) -> dict[str, str]:
    """Preset environment defaults; the loop's own `env` wins."""
    if loop.command:
        return {}
    preset = PRESETS[loop.agent or "shell"]
    env = dict(preset.env)
    if loop.yolo and preset.name == "goose":
        env["GOOSE_MODE"] = "auto"
    return env


def read_output(loop: LoopDef, head: bytes, tail: bytes, exit_code: int | None) -> Reading:
    """What the run's output says: result text, session, cost, errors, limits."""
    if not is_agent(loop):
        return read_text(head, tail, exit_code, agent=False)
    preset = PRESETS[loop.agent or "shell"]
    return READERS[preset.reader](head, tail, exit_code)
