"""Agent presets: the argv each agent is run with (DESIGN §6; issue 4). The
prompt arrives intact exactly once, after `--` or the option that takes it (or
on stdin); the safe default has no permission bypass and `yolo` swaps one in;
model, extra args and session resume go before the prompt; each agent's
machine-readable output flag is there. Also `--command` loops (placeholders,
the prompt on stdin when none takes it) and the `shell` preset.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

import pytest
from agents_support import ALL, PROMPT_PATH, RUN_ID, command_loop, make_loop
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopctl.agents import presets as agents
from loopctl.agents.presets import PRESETS, build_argv
from loopctl.domain.model import parse_loop

# Prompts that break naive quoting: spaces, both quotes, newlines, unicode,
# shell metacharacters, a leading `-` and `--`, and our own placeholders.
NASTY_PROMPTS = [
    "fix the failing test in src/app.py",
    "-rf / && echo 'hi' \"there\"\nline2",
    "--help",
    "-",
    "it's \"quoted\" $HOME `whoami` $(id) \\ back; | & > <",
    "ünïcödé ✓ 日本語 🚀",
    "{loop} {run_id} {prompt_file} {prompt} {resume} {session}",
    "  leading and trailing blanks  \n\n",
    "line1\r\nline2\ttab",
]

# The end of each preset's argv: where the prompt goes. `--` or the option that
# takes the prompt stays right before it, so a prompt starting with `-` cannot
# be read as an option; stdin presets keep their stdin marker last.
PROMPT_TAIL: dict[str, Callable[[str], list[str]]] = {
    "shell": lambda p: ["--", p],
    "claude": lambda p: ["--", p],
    "codex": lambda p: ["-"],
    "gemini": lambda p: [f"--prompt={p}"],
    "qwen": lambda p: [f"--prompt={p}"],
    "opencode": lambda p: ["--", p],
    "aider": lambda p: [f"--message={p}"],
    "goose": lambda p: ["-i", "-"],
    "pi": lambda p: [],
    "cursor": lambda p: ["--", p],
    "copilot": lambda p: [f"--prompt={p}"],
    "crush": lambda p: ["--", p],
    "amp": lambda p: ["-x", p],
}
STDIN_PRESETS = {"codex", "goose", "pi"}

# Each agent's machine-readable output flag (DESIGN §6); text-only agents: none.
OUTPUT_FLAGS: dict[str, list[str]] = {
    "claude": ["--output-format", "json"],
    "codex": ["--json"],
    "gemini": ["--output-format", "json"],
    "qwen": ["--output-format", "json"],
    "opencode": ["--format", "json"],
    "goose": ["--output-format", "json"],
    "pi": ["--mode", "json"],
    "cursor": ["--output-format", "json"],
    "copilot": ["--output-format", "json"],
    "amp": ["--stream-json"],
}

BYPASS_FLAGS = {
    "--dangerously-skip-permissions",
    "--dangerously-bypass-approvals-and-sandbox",
    "--yolo",
    "-y",
    "--force",
    "--allow-all",
    "--dangerously-allow-all",
    "--auto",
}
BYPASS_PAIRS = {
    ("--approval-mode", "yolo"),
    ("--sandbox", "danger-full-access"),
    ("--permission-mode", "bypassPermissions"),
}


def argv_for(name: str, prompt: str = "do the thing", resume: str | None = None,
             **raw: Any) -> tuple[list[str], str | None]:
    return build_argv(make_loop(name, **raw), prompt, PROMPT_PATH, RUN_ID,
                      resume_session=resume)


def find_run(argv: list[str], run: list[str]) -> int:
    """Index where `run` occurs contiguously in argv, or -1."""
    for i in range(len(argv) - len(run) + 1):
        if argv[i:i + len(run)] == run:
            return i
    return -1


def has_bypass(argv: list[str]) -> bool:
    for i, arg in enumerate(argv):
        if arg in BYPASS_FLAGS or arg.split("=", 1)[0] in BYPASS_FLAGS and "=" in arg:
            return True
        if "=" in arg and tuple(arg.split("=", 1)) in BYPASS_PAIRS:
            return True
        if i + 1 < len(argv) and (arg, argv[i + 1]) in BYPASS_PAIRS:
            return True
    return False


def assert_inserted(name: str, argv: list[str], base: list[str], inserted: list[str],
                    prompt: str = "do the thing") -> None:
    """argv is `base` with `inserted` added somewhere before the prompt, and the
    prompt (with its `--` or option) is still last."""
    tail = PROMPT_TAIL[name](prompt)
    assert argv[len(argv) - len(tail):] == tail, f"{name}: prompt tail broken in {argv}"
    at = find_run(argv[:len(argv) - len(tail)], inserted)
    assert at >= 0, f"{name}: {inserted} not before the prompt in {argv}"
    assert argv[:at] + argv[at + len(inserted):] == base, f"{name}: other args changed"


# =====================================================================================
# 1. Presets: the argv
# =====================================================================================


def test_tables_cover_every_preset() -> None:
    """A new preset must be added to this file's tables (and DESIGN §6's list)."""
    assert set(PROMPT_TAIL) == set(PRESETS)
    assert set(PRESETS) == {"claude", "codex", "gemini", "qwen", "opencode", "aider", "goose",
                            "pi", "cursor", "copilot", "crush", "amp", "shell"}


@pytest.mark.parametrize("name", ALL)
def test_argv_starts_with_the_presets_binary(name: str) -> None:
    loop = make_loop(name)
    argv, _ = build_argv(loop, "do the thing", PROMPT_PATH, RUN_ID)
    assert argv[0] == PRESETS[name].binary
    assert agents.binary(loop) == PRESETS[name].binary


@pytest.mark.parametrize("prompt", NASTY_PROMPTS, ids=range(len(NASTY_PROMPTS)))
@pytest.mark.parametrize("name", ALL)
def test_prompt_arrives_intact_exactly_once(name: str, prompt: str) -> None:
    argv, stdin = argv_for(name, prompt)
    other, _ = argv_for(name, "PLACEHOLDER-PROMPT")
    tail = PROMPT_TAIL[name](prompt)
    if name in STDIN_PRESETS:
        assert stdin == prompt
        assert argv == other, "a stdin preset's argv must not depend on the prompt"
    else:
        assert stdin is None
        # The prompt is exactly the tail (one element, or inside `--flag=`),
        # after `--` or the option that takes it; nothing else changed.
        assert argv[len(argv) - len(tail):] == tail
        assert argv[:len(argv) - len(tail)] == other[:len(other) - len(tail)]
    assert all(isinstance(a, str) for a in argv)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(prompt=st.text(min_size=1, max_size=80))
def test_any_prompt_arrives_intact(prompt: str) -> None:
    for name in ALL:
        argv, stdin = argv_for(name, prompt)
        if name in STDIN_PRESETS:
            assert stdin == prompt
        else:
            tail = PROMPT_TAIL[name](prompt)
            assert stdin is None and argv[len(argv) - len(tail):] == tail


@pytest.mark.parametrize("name", ALL)
def test_prompt_after_guard_or_its_option(name: str) -> None:
    """A separate prompt element follows `--` or the option that takes it."""
    prompt = "-rf / && echo 'hi' \"there\"\nline2"
    argv, stdin = argv_for(name, prompt)
    if name in STDIN_PRESETS:
        assert stdin == prompt and not any(prompt in arg for arg in argv)
    elif prompt in argv:  # its own element: last, right after a guard or its option
        at = argv.index(prompt)
        assert at == len(argv) - 1
        assert argv[at - 1] in ("--", "-x", "-c")
        assert argv.count(prompt) == 1
    else:  # glued to its option (`--prompt=...`), so it can never read as a flag
        (glued,) = [arg for arg in argv if arg.endswith("=" + prompt)]
        assert glued == argv[-1] and glued.startswith("--")


def test_shell_preset_runs_a_command_starting_with_dash() -> None:
    prompt = "-definitely-not-a-command 2>/dev/null; echo ran-$((40+2))"
    argv, stdin = argv_for("shell", prompt)
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=10)
    assert "ran-42" in done.stdout


@pytest.mark.parametrize("name", ALL)
def test_safe_default_has_no_bypass(name: str) -> None:
    loop = make_loop(name)
    argv, _ = build_argv(loop, "do the thing", PROMPT_PATH, RUN_ID, resume_session="S1")
    assert not has_bypass(argv), argv
    assert agents.env_for(loop).get("GOOSE_MODE") != "auto"
    argv, _ = argv_for(name, model="m1", agent_args=["--x", "y"])
    assert not has_bypass(argv), argv


@pytest.mark.parametrize("name", [n for n in ALL if PRESETS[n].bypass])
def test_bypass_checker_recognises_each_presets_bypass(name: str) -> None:
    """Guards the check above: it would catch every preset's --yolo flag."""
    assert has_bypass(list(PRESETS[name].bypass))


@pytest.mark.parametrize("name", ALL)
def test_yolo_swaps_in_the_bypass(name: str) -> None:
    preset = PRESETS[name]
    safe, _ = argv_for(name)
    argv, _ = argv_for(name, yolo=True)
    if not preset.bypass:
        assert argv == safe
        return
    tail = PROMPT_TAIL[name]("do the thing")
    assert argv[len(argv) - len(tail):] == tail
    assert find_run(argv[:len(argv) - len(tail)], list(preset.bypass)) >= 0
    if preset.drop_for_bypass:
        assert find_run(safe, list(preset.drop_for_bypass)) >= 0
        assert find_run(argv, list(preset.drop_for_bypass)) < 0
    assert has_bypass(argv)


def test_yolo_examples() -> None:
    claude, _ = argv_for("claude", yolo=True)
    assert "--dangerously-skip-permissions" in claude
    assert "--permission-mode" not in claude
    codex, _ = argv_for("codex", yolo=True)
    assert "--dangerously-bypass-approvals-and-sandbox" in codex
    assert "--sandbox" not in codex
    gemini, _ = argv_for("gemini", yolo=True)
    assert find_run(gemini, ["--approval-mode", "yolo"]) >= 0
    assert "auto_edit" not in gemini


def test_goose_yolo_is_an_environment_switch() -> None:
    assert agents.env_for(make_loop("goose")) == {"GOOSE_MODE": "smart_approve"}
    assert agents.env_for(make_loop("goose", yolo=True)) == {"GOOSE_MODE": "auto"}
    assert agents.env_for(make_loop("claude", yolo=True)) == {}


def _every_preset(names: list[str]) -> list[Any]:
    return [n for n in names]


@pytest.mark.parametrize("name", _every_preset(ALL))
def test_model_flag_goes_before_the_prompt(name: str) -> None:
    base, _ = argv_for(name)
    argv, _ = argv_for(name, model="m1")
    flag = list(PRESETS[name].model_flag)
    if not flag:
        assert argv == base and "m1" not in argv
        return
    assert_inserted(name, argv, base, [*flag, "m1"])


@pytest.mark.parametrize("name", _every_preset(ALL))
def test_agent_args_go_before_the_prompt(name: str) -> None:
    base, _ = argv_for(name)
    argv, _ = argv_for(name, agent_args=["--x", "y"])
    assert_inserted(name, argv, base, ["--x", "y"])


@pytest.mark.parametrize("name", ALL)
def test_resume_session(name: str) -> None:
    preset = PRESETS[name]
    base, _ = argv_for(name)
    argv, _ = argv_for(name, resume="S1")
    if not preset.resume:
        assert argv == base
        return
    expected = [a.replace("{session}", "S1") for a in preset.resume]
    assert any("S1" in a for a in expected)
    assert_inserted(name, argv, base, expected)


def test_resume_examples() -> None:
    claude, _ = argv_for("claude", resume="S1")
    assert find_run(claude, ["--resume", "S1"]) >= 0
    copilot, _ = argv_for("copilot", resume="S1")
    assert "--resume=S1" in copilot
    amp, _ = argv_for("amp", resume="S1")
    assert amp[:4] == ["amp", "threads", "continue", "S1"]


@pytest.mark.parametrize("extra", [{}, {"yolo": True}, {"model": "m1"}])
def test_codex_resume_is_a_subcommand_after_exec_options(extra: dict[str, Any]) -> None:
    argv, stdin = argv_for("codex", "the prompt", resume="S1", **extra)
    assert argv[:2] == ["codex", "exec"]
    at = argv.index("resume")
    assert argv[at + 1] == "S1"
    if not extra.get("yolo"):
        assert argv.index("--sandbox") < at, "exec's --sandbox must come before `resume`"
    assert argv[-1] == "-" and stdin == "the prompt"
    assert argv.count("resume") == 1


@pytest.mark.parametrize("name", ALL)
def test_no_template_placeholder_is_left_over(name: str) -> None:
    for resume in (None, "S1"):
        for extra in ({}, {"yolo": True, "model": "m1", "agent_args": ["--x", "y"]}):
            argv, _ = argv_for(name, "plain prompt", resume=resume, **extra)
            for arg in argv:
                assert "{" not in arg and "}" not in arg, (name, argv)


@pytest.mark.parametrize("name", _every_preset(ALL))
def test_everything_at_once(name: str) -> None:
    preset = PRESETS[name]
    prompt = "-rf / && echo 'hi' \"there\"\nline2"
    argv, stdin = argv_for(name, prompt, resume="S1", yolo=True, model="m1",
                           agent_args=["--x", "y"])
    tail = PROMPT_TAIL[name](prompt)
    assert argv[len(argv) - len(tail):] == tail
    head = argv[:len(argv) - len(tail)]
    assert find_run(head, ["--x", "y"]) >= 0
    if preset.model_flag:
        assert find_run(head, [*preset.model_flag, "m1"]) >= 0
    if preset.bypass:
        assert find_run(head, list(preset.bypass)) >= 0
    if preset.resume:
        assert find_run(head, [a.replace("{session}", "S1") for a in preset.resume]) >= 0
    assert (stdin == prompt) == (name in STDIN_PRESETS)


def test_claude_preapproves_only_loopctl_decide() -> None:
    argv, _ = argv_for("claude")
    assert "--allowedTools=Bash(loopctl decide *)" in argv
    assert [a for a in argv if a.startswith("--allowedTools")] == [
        "--allowedTools=Bash(loopctl decide *)"]
    assert argv[:2] == ["claude", "-p"]


@pytest.mark.parametrize("name", sorted(OUTPUT_FLAGS))
def test_machine_readable_output_flag(name: str) -> None:
    argv, _ = argv_for(name)
    assert find_run(argv, OUTPUT_FLAGS[name]) >= 0


def test_which_loops_are_agents() -> None:
    assert agents.is_agent(make_loop("claude"))
    assert agents.wants_envelope(make_loop("claude"))
    assert not agents.wants_envelope(make_loop("claude", raw=True))
    assert not agents.is_agent(make_loop("shell"))
    assert not agents.wants_envelope(make_loop("shell"))
    assert not agents.is_agent(command_loop("prog {prompt}"))
    assert not agents.wants_envelope(command_loop("prog {prompt}"))


# =====================================================================================
# 2. --command loops and the shell preset
# =====================================================================================


@pytest.mark.parametrize("prompt", NASTY_PROMPTS, ids=range(len(NASTY_PROMPTS)))
def test_command_placeholders_are_filled(prompt: str) -> None:
    loop = command_loop("prog --flag {prompt} --file={prompt_file} --name {loop} "
                        "--run {run_id} 'two words'")
    argv, stdin = build_argv(loop, prompt, PROMPT_PATH, RUN_ID)
    assert argv == ["prog", "--flag", prompt, f"--file={PROMPT_PATH}", "--name", "demo",
                    "--run", RUN_ID, "two words"]
    assert stdin is None


def test_command_placeholder_inside_an_argument() -> None:
    loop = command_loop("prog --message={prompt} run-{run_id}.log")
    argv, stdin = build_argv(loop, "say 'hi'\n{loop}", PROMPT_PATH, RUN_ID)
    assert argv == ["prog", "--message=say 'hi'\n{loop}", "run-RUNID.log"]
    assert stdin is None


def test_command_as_a_list_is_not_split_again() -> None:
    loop = command_loop(["prog", "a b", "{prompt}"])
    argv, stdin = build_argv(loop, "x y", PROMPT_PATH, RUN_ID)
    assert argv == ["prog", "a b", "x y"] and stdin is None


def test_command_without_prompt_placeholder_gets_prompt_on_stdin() -> None:
    loop = command_loop("prog --name {loop} --run {run_id}")
    argv, stdin = build_argv(loop, "the whole\nprompt", PROMPT_PATH, RUN_ID)
    assert argv == ["prog", "--name", "demo", "--run", RUN_ID]
    assert stdin == "the whole\nprompt"


def test_command_with_only_prompt_file_gets_no_stdin() -> None:
    loop = command_loop("prog {prompt_file}")
    argv, stdin = build_argv(loop, "the prompt", PROMPT_PATH, RUN_ID)
    assert argv == ["prog", PROMPT_PATH]
    assert stdin is None


def test_command_loop_facts() -> None:
    loop = command_loop("/usr/bin/prog {prompt}")
    assert agents.binary(loop) == "/usr/bin/prog"
    assert agents.env_for(loop) == {}


@pytest.mark.parametrize("prompt", ["echo hi && date", "printf '%s\\n' \"a b\"\nexit 3"])
def test_shell_preset_is_sh_c_prompt(prompt: str) -> None:
    argv, stdin = build_argv(make_loop("shell"), prompt, PROMPT_PATH, RUN_ID)
    assert argv == ["sh", "-c", "--", prompt]  # `--`: a prompt may start with `-`
    assert stdin is None


def test_shell_is_the_default_agent() -> None:
    loop = parse_loop("demo", {"prompt": "echo hi", "every": "1h"})
    assert build_argv(loop, "echo hi", PROMPT_PATH, RUN_ID) == (
        ["sh", "-c", "--", "echo hi"], None)
