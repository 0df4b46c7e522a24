"""Agent presets (the argv each agent is run with) and the output readers
(what a run's log says: result text, session, cost, errors, usage limits).
DESIGN §6; issue 4.

Sample outputs: tests/samples/ holds real Claude Code 2.1.328 results (see
tests/samples/README.md); the others are built here from each CLI's documented
machine-readable format. Nothing here reads the real clock or sleeps: reset
times are computed against fixed `now` values in fixed time zones.
"""

from __future__ import annotations

import calendar
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopctl.agents import presets as agents
from loopctl.agents import readers
from loopctl.agents.presets import PRESETS, build_argv, read_output
from loopctl.agents.readers import READERS, Reading
from loopctl.domain.model import LoopDef, parse_loop
from loopctl.engine.supervisor import one_line

SAMPLES = Path(__file__).parent / "samples"
PROMPT_PATH = "/tmp/p.txt"
RUN_ID = "RUNID"

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



def make_loop(agent: str = "claude", **raw: Any) -> LoopDef:
    spec: dict[str, Any] = {"prompt": "p", "every": "1h", "agent": agent, "cwd": "/tmp"}
    spec.update(raw)
    return parse_loop("demo", spec)


def command_loop(command: str | list[str], **raw: Any) -> LoopDef:
    spec: dict[str, Any] = {"prompt": "p", "every": "1h", "command": command, "cwd": "/tmp"}
    spec.update(raw)
    return parse_loop("demo", spec)


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


def log_header(loop: LoopDef, prompt: str) -> bytes:
    """The start line the supervisor writes to every run log (after the agent's
    output since issue 15; before it earlier). Readers must skip it either way."""
    argv, _ = build_argv(loop, prompt, PROMPT_PATH, RUN_ID)
    return (f"# loopctl: run {RUN_ID} of {loop.name} (iteration 1) started "
            f"2026-01-15T10:00:00Z in /tmp: {one_line(argv)}\n").encode()


def assert_reading_types(reading: Reading) -> None:
    assert isinstance(reading, Reading)
    for name in ("result_text", "session_id", "error"):
        value = getattr(reading, name)
        assert value is None or isinstance(value, str), f"{name}={value!r}"
    assert reading.cost_usd is None or isinstance(reading.cost_usd, float)
    assert reading.reset_at is None or isinstance(reading.reset_at, float)
    assert isinstance(reading.is_error, bool)
    assert isinstance(reading.rate_limited, bool)


# -- fixed clocks --------------------------------------------------------------------

UTC = "UTC0"
NEW_YORK = "EST5EDT,M3.2.0,M11.1.0"  # POSIX rule: needs no tz database


def utc(*fields: int) -> float:
    return float(calendar.timegm((*fields, 0)[:6]))


@pytest.fixture
def local_tz() -> Iterator[Callable[[str], None]]:
    """Set the process's local time zone for the test; restore it afterwards."""
    saved = os.environ.get("TZ")

    def use(tz: str) -> None:
        os.environ["TZ"] = tz
        time.tzset()

    yield use
    if saved is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = saved
    time.tzset()


NOW = utc(2026, 1, 15, 10, 0, 0)  # Thursday 10:00 UTC
NEXT_1PM = utc(2026, 1, 15, 13, 0, 0)


@pytest.fixture
def frozen(local_tz: Callable[[str], None], monkeypatch: pytest.MonkeyPatch) -> float:
    """Local time is UTC and the readers' clock says NOW."""
    local_tz(UTC)
    monkeypatch.setattr(readers, "time", SimpleNamespace(time=lambda: NOW))
    return NOW


# =====================================================================================
# 1. Presets: the argv
# =====================================================================================

ALL = sorted(PRESETS)
AGENTS = [n for n in ALL if n != "shell"]


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
          suppress_health_check=[HealthCheck.function_scoped_fixture])
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


# =====================================================================================
# 3. Readers
# =====================================================================================


def sample(name: str) -> bytes:
    return (SAMPLES / name).read_bytes()


def read(name: str, output: bytes, exit_code: int | None = 0, *, header: bool = True,
         prompt: str = "do the thing", **raw: Any) -> Reading:
    """Read a run log the way the supervisor does: header line, then the
    output; a small log is both the head and the tail."""
    loop = make_loop(name, **raw)
    log = (log_header(loop, prompt) if header else b"") + output
    reading = read_output(loop, log, log, exit_code)
    assert_reading_types(reading)
    return reading


# -- the real Claude Code samples ---------------------------------------------------


@pytest.mark.parametrize("header", [False, True])
def test_claude_real_success(header: bool) -> None:
    reading = read("claude", sample("claude-2.1.328-result-success.json"), 0, header=header)
    assert reading.result_text == "STUB-OK: nothing to do"
    assert reading.session_id == "3d9762b8-fdf4-4fcd-ac97-2acb8cc72d65"
    assert reading.cost_usd == pytest.approx(0.00014)
    assert not reading.is_error and reading.error is None
    assert not reading.rate_limited and reading.reset_at is None


@pytest.mark.parametrize("header", [False, True])
def test_claude_real_permission_denied_is_not_an_error(header: bool) -> None:
    reading = read("claude", sample("claude-2.1.328-result-permission-denied.json"), 0,
                   header=header)
    assert reading.result_text == "STUB-OK"
    assert reading.session_id == "9891c4b5-860e-416d-9f50-52480cbfe4ce"
    assert reading.cost_usd == pytest.approx(0.00028)
    assert not reading.is_error and not reading.rate_limited


@pytest.mark.parametrize("header", [False, True])
def test_claude_real_429_is_a_rate_limit_without_reset(header: bool) -> None:
    reading = read("claude", sample("claude-2.1.328-result-rate-limited-429.json"), 1,
                   header=header)
    assert reading.is_error
    assert reading.rate_limited
    assert reading.reset_at is None
    assert reading.error is not None and "429" in reading.error
    assert reading.session_id == "6cd62252-f82a-472c-a6c9-d80816335b62"
    assert reading.cost_usd == 0.0


def test_claude_real_samples_direct() -> None:
    data = sample("claude-2.1.328-result-success.json")
    assert readers.read_claude(data, data, 0).result_text == "STUB-OK: nothing to do"
    data = sample("claude-2.1.328-result-rate-limited-429.json")
    assert readers.read_claude(data, data, 1).rate_limited


# -- constructed samples, per preset -------------------------------------------------


def jl(*events: Any) -> bytes:
    return ("\n".join(json.dumps(e) for e in events) + "\n").encode()


def claude_result(result: str | None, *, is_error: bool = False, session: str = "c-sess",
                  cost: float | None = 0.0123, subtype: str = "success",
                  **extra: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"type": "result", "subtype": subtype, "is_error": is_error,
                           "duration_ms": 1200, "num_turns": 1, "session_id": session,
                           "api_error_status": None}
    if result is not None:
        obj["result"] = result
    if cost is not None:
        obj["total_cost_usd"] = cost
    obj.update(extra)
    return obj


def codex_ok(text: str) -> bytes:
    return jl({"type": "thread.started", "thread_id": "0199a213-81c0-7800-8aa1-bbab2a035a53"},
              {"type": "turn.started"},
              {"type": "item.completed", "item": {"id": "item_0", "type": "reasoning",
                                                  "text": "**Looking at the tests**"}},
              {"type": "item.completed", "item": {"id": "item_1", "type": "command_execution",
                                                  "command": "bash -lc 'pytest -q'",
                                                  "aggregated_output": "1 passed",
                                                  "exit_code": 0, "status": "completed"}},
              {"type": "item.completed", "item": {"id": "item_2", "type": "agent_message",
                                                  "text": text}},
              {"type": "turn.completed", "usage": {"input_tokens": 2400,
                                                   "cached_input_tokens": 1024,
                                                   "output_tokens": 120}})


def codex_fail(message: str) -> bytes:
    return jl({"type": "thread.started", "thread_id": "0199a213-81c0-7800-8aa1-bbab2a035a53"},
              {"type": "turn.started"},
              {"type": "error", "message": message},
              {"type": "turn.failed", "error": {"message": message}})


def gemini_out(**obj: Any) -> bytes:
    return (json.dumps({"session_id": "g-sess", **obj}, indent=2) + "\n").encode()


def opencode_ok(text: str) -> bytes:
    sid = "ses_6a1b2c3d4e5fXyZ"
    return jl({"type": "step_start", "timestamp": 1, "sessionID": sid,
               "part": {"type": "step-start"}},
              {"type": "text", "timestamp": 2, "sessionID": sid,
               "part": {"type": "text", "text": "Let me look at the file."}},
              {"type": "tool_use", "timestamp": 3, "sessionID": sid,
               "part": {"type": "tool", "tool": "read", "state": {"status": "completed"}}},
              {"type": "step_finish", "timestamp": 4, "sessionID": sid,
               "part": {"type": "step-finish", "reason": "tool-calls"}},
              {"type": "step_start", "timestamp": 5, "sessionID": sid,
               "part": {"type": "step-start"}},
              {"type": "text", "timestamp": 6, "sessionID": sid,
               "part": {"type": "text", "text": text}},
              {"type": "step_finish", "timestamp": 7, "sessionID": sid,
               "part": {"type": "step-finish", "reason": "stop"}})


def opencode_fail(message: str) -> bytes:
    sid = "ses_6a1b2c3d4e5fXyZ"
    return jl({"type": "step_start", "timestamp": 1, "sessionID": sid,
               "part": {"type": "step-start"}},
              {"type": "error", "timestamp": 2, "sessionID": sid,
               "error": {"message": message}})


def pi_out(text: str, *, stop: str = "stop", error: str | None = None,
           cost: float = 0.01) -> bytes:
    assistant: dict[str, Any] = {"role": "assistant",
                                 "content": [{"type": "text", "text": text}] if text else [],
                                 "usage": {"input": 900, "output": 40,
                                           "cost": {"input": cost / 2, "output": cost / 2,
                                                    "total": cost}},
                                 "stopReason": stop}
    if error is not None:
        assistant["errorMessage"] = error
    return jl({"type": "session", "version": 3, "id": "pi-sess-1",
               "timestamp": "2026-01-15T10:00:00.000Z", "cwd": "/tmp"},
              {"type": "agent_start"},
              {"type": "turn_start"},
              {"type": "agent_end", "messages": [
                  {"role": "user", "content": [{"type": "text", "text": "the prompt"}]},
                  assistant]})


def goose_out(text: str, status: str = "completed", cost: float | None = 0.02) -> bytes:
    meta: dict[str, Any] = {"total_tokens": 1234, "status": status}
    if cost is not None:
        meta["cost_usd"] = cost
    return (json.dumps({"messages": [
        {"role": "user", "content": [{"type": "text", "text": "the prompt"}]},
        {"role": "assistant", "content": [{"type": "text", "text": text}]}],
        "metadata": meta}) + "\n").encode()


def copilot_ok(text: str) -> bytes:
    """Copilot CLI `--output-format json` as it really is: the text is under
    `data.content`; the prompt is echoed as a user.message event."""
    return jl({"type": "session.start", "data": {"sessionId": "cp-sess", "version": 1}},
              {"type": "user.message", "data": {"content": "the prompt says DONE"}},
              {"type": "assistant.message", "data": {"content": "Checking the files.",
                                                     "toolRequests": [{"name": "view"}]}},
              {"type": "tool.execution_complete", "data": {"toolCallId": "c1",
                                                           "success": True}},
              {"type": "assistant.message", "data": {"content": text, "toolRequests": []}},
              {"type": "result", "timestamp": "2026-01-15T10:00:05.000Z",
               "sessionId": "cp-sess", "exitCode": 0,
               "usage": {"premiumRequests": 1, "totalApiDurationMs": 5000}})


@dataclass(frozen=True)
class Agent:
    ok: Callable[[str], bytes]  # a successful run whose final text is the argument
    fail: Callable[[str], bytes] | None  # a failed run reporting this message
    session: str | None
    cost: float | None
    exact_text: bool = True  # False: plain text, the result is the output's end


AGENT_OUTPUTS: dict[str, Agent] = {
    "claude": Agent(lambda t: jl(claude_result(t)),
                    lambda m: jl(claude_result(m, is_error=True, cost=0)), "c-sess", 0.0123),
    "cursor": Agent(lambda t: jl(claude_result(t, session="cur-sess", cost=None,
                                               request_id="req-1")),
                    lambda m: jl(claude_result(m, is_error=True, session="cur-sess",
                                               cost=None, subtype="error")),
                    "cur-sess", None),
    "amp": Agent(lambda t: jl({"type": "system", "subtype": "init", "session_id": "T-amp"},
                              {"type": "assistant", "session_id": "T-amp",
                               "message": {"role": "assistant",
                                           "content": [{"type": "text", "text": t}]}},
                              claude_result(t, session="T-amp", cost=None)),
                 lambda m: jl({"type": "system", "subtype": "init", "session_id": "T-amp"},
                              claude_result(None, is_error=True, session="T-amp", cost=None,
                                            subtype="error_during_execution", error=m)),
                 "T-amp", None),
    "qwen": Agent(lambda t: (json.dumps([
                      {"type": "system", "subtype": "init", "session_id": "q-sess"},
                      {"type": "assistant", "session_id": "q-sess",
                       "message": {"role": "assistant",
                                   "content": [{"type": "text", "text": t}]}},
                      claude_result(t, session="q-sess", cost=None)]) + "\n").encode(),
                  lambda m: (json.dumps([
                      {"type": "system", "subtype": "init", "session_id": "q-sess"},
                      claude_result(None, is_error=True, session="q-sess", cost=None,
                                    subtype="error_during_execution",
                                    error={"type": "api_error", "message": m})]) + "\n"
                             ).encode(),
                  "q-sess", None),
    "codex": Agent(codex_ok, codex_fail, "0199a213-81c0-7800-8aa1-bbab2a035a53", None),
    "gemini": Agent(lambda t: gemini_out(response=t, stats={"models": {
                        "gemini-2.5-pro": {"tokens": {"prompt": 900, "total": 1000}}}}),
                    lambda m: gemini_out(error={"type": "ApiError", "message": m, "code": 1}),
                    "g-sess", None),
    "opencode": Agent(opencode_ok, opencode_fail, "ses_6a1b2c3d4e5fXyZ", None),
    "pi": Agent(pi_out, lambda m: pi_out("", stop="error", error=m, cost=0.0),
                "pi-sess-1", 0.01),
    "goose": Agent(goose_out,
                   # goose reports provider failures on stderr, without the JSON
                   lambda m: f"Error: {m}\n".encode(), None, 0.02),
    "aider": Agent(lambda t: ("Aider v0.86.1\nMain model: anthropic/claude-sonnet-4 with "
                              "diff edit format\nGit repo: .git with 12 files\n\n"
                              f"Applied edit to src/app.py\n{t}\n").encode(),
                   lambda m: (f"litellm.RateLimitError: AnthropicException - {m}\n"
                              "The API provider has rate limited you. Try again later or "
                              "check your quotas.\n").encode(),
                   None, None, exact_text=False),
    "crush": Agent(lambda t: f"{t}\n".encode(), lambda m: f"Error: {m}\n".encode(),
                   None, None, exact_text=False),
    "copilot": Agent(copilot_ok, None, "cp-sess", None),
}



def test_agent_outputs_cover_every_agent() -> None:
    assert set(AGENT_OUTPUTS) == set(AGENTS)


@pytest.mark.parametrize("name", [n for n in AGENTS])
def test_success_result_text(name: str) -> None:
    spec = AGENT_OUTPUTS[name]
    text = "All 12 tests pass; the parser bug is fixed."
    reading = read(name, spec.ok(text), 0)
    if spec.exact_text:
        assert reading.result_text == text
    else:
        assert reading.result_text is not None and reading.result_text.endswith(text)
    assert "loopctl" not in (reading.result_text or "")
    assert not reading.is_error and reading.error is None
    assert not reading.rate_limited and reading.reset_at is None


@pytest.mark.parametrize("name", AGENTS)
def test_success_session_and_cost(name: str) -> None:
    spec = AGENT_OUTPUTS[name]
    reading = read(name, spec.ok("done"), 0)
    assert reading.session_id == spec.session
    if spec.cost is None:
        assert reading.cost_usd is None
    else:
        assert reading.cost_usd == pytest.approx(spec.cost)


@pytest.mark.parametrize("name", AGENTS)
def test_success_without_the_header(name: str) -> None:
    spec = AGENT_OUTPUTS[name]
    with_header = read(name, spec.ok("done"), 0)
    without = read(name, spec.ok("done"), 0, header=False)
    assert with_header == without


@pytest.mark.parametrize("name", [n for n in AGENTS if AGENT_OUTPUTS[n].exact_text])
def test_success_text_mentioning_limits_is_not_a_limit(name: str) -> None:
    """Only error reports are searched for limits, not the agent's own words
    (plain-text agents: see the false-positive test below)."""
    spec = AGENT_OUTPUTS[name]
    text = "Added handling for HTTP 429 and the rate limit; usage limit reached|1767225600"
    reading = read(name, spec.ok(text), 0)
    assert not reading.rate_limited and not reading.is_error


ERROR_EXIT0 = ["claude", "cursor", "amp", "qwen", "codex", "gemini", "opencode", "pi"]


@pytest.mark.parametrize("name", ERROR_EXIT0)
def test_error_reported_with_exit_0(name: str) -> None:
    message = "upstream model overloaded, giving up after 3 attempts"
    fail = AGENT_OUTPUTS[name].fail
    assert fail is not None
    reading = read(name, fail(message), 0)
    assert reading.is_error
    assert reading.error is not None and message in reading.error
    assert not reading.rate_limited and reading.reset_at is None


def test_claude_error_subtype_without_result() -> None:
    out = jl(claude_result(None, is_error=True, subtype="error_max_turns", num_turns=30))
    reading = read("claude", out, 0)
    assert reading.is_error and reading.error == "error_max_turns"
    assert reading.result_text is None and not reading.rate_limited


def test_claude_error_subtype_alone_is_an_error() -> None:
    out = jl(claude_result(None, is_error=False, subtype="error_during_execution"))
    assert read("claude", out, 0).is_error


def test_claude_api_rate_limit_text_with_exit_0() -> None:
    """anthropics/claude-code#79500: `subtype: success`, `is_error: true`, exit 0."""
    out = jl(claude_result("API Error: Rate limit reached", is_error=True, cost=0,
                           stop_reason="stop_sequence"))
    reading = read("claude", out, 0)
    assert reading.is_error and reading.rate_limited and reading.reset_at is None


def test_gemini_turn_limit_is_an_error_not_a_limit() -> None:
    out = gemini_out(error={"type": "FatalTurnLimitedError",
                            "message": "Reached max session turns for this session.",
                            "code": 53})
    reading = read("gemini", out, 53)
    assert reading.is_error and not reading.rate_limited


def test_gemini_quota_error_code_429() -> None:
    out = gemini_out(error={"type": "ApiError", "code": 429,
                            "message": "Quota exceeded for quota metric 'Gemini 2.5 Pro "
                                       "Requests' and limit 'per day'"})
    reading = read("gemini", out, 1)
    assert reading.is_error and reading.rate_limited


def test_gemini_one_line_json() -> None:
    out = (json.dumps({"session_id": "g-sess", "response": "ok", "stats": {}}) + "\n").encode()
    assert read("gemini", out, 0).result_text == "ok"


def test_goose_error_status_with_exit_0() -> None:
    reading = read("goose", goose_out("I could not finish.", status="error"), 0)
    assert reading.is_error and reading.error
    assert reading.result_text == "I could not finish."


def test_pi_error_does_not_change_exit_code_but_is_read() -> None:
    reading = read("pi", pi_out("", stop="error", error="529 overloaded_error"), 0)
    assert reading.is_error and reading.error == "529 overloaded_error"
    assert reading.session_id == "pi-sess-1"


def test_opencode_last_step_is_the_result() -> None:
    reading = read("opencode", opencode_ok("Fixed it."), 0)
    assert reading.result_text == "Fixed it."


def test_qwen_array_finds_the_result_element() -> None:
    reading = read("qwen", AGENT_OUTPUTS["qwen"].ok("the answer"), 0)
    assert reading.result_text == "the answer" and reading.session_id == "q-sess"


def test_aider_provider_rate_limit_text() -> None:
    out = (b"litellm.RateLimitError: AnthropicException - "
           b'{"type":"error","error":{"type":"rate_limit_error","message":"Number of request '
           b'tokens has exceeded your per-minute rate limit"}}\n'
           b"The API provider has rate limited you. Try again later or check your quotas.\n"
           )
    reading = read("aider", out, 0)
    assert reading.rate_limited and reading.reset_at is None


def test_aider_failed_model_call_with_exit_0_is_an_error() -> None:
    out = (b"litellm.AuthenticationError: AnthropicException - "
           b'{"type":"error","error":{"type":"authentication_error","message":"invalid '
           b'x-api-key"}}\n'
           b"The API provider is not able to authenticate you. Check your API key.\n")
    assert read("aider", out, 0).is_error


@pytest.mark.parametrize("name", ["aider", "crush"])
def test_plain_text_agent_talking_about_rate_limits_is_not_limited(name: str) -> None:
    out = AGENT_OUTPUTS[name].ok("Added a rate limit (HTTP 429) to the /login endpoint.")
    assert not read(name, out, 0).rate_limited


def test_codex_retried_error_then_completed_turn_is_a_success() -> None:
    out = jl({"type": "thread.started", "thread_id": "t-1"},
             {"type": "turn.started"},
             {"type": "error", "message": "Reconnecting... 1/5 (stream disconnected before "
                                          "completion: error sending request)"},
             {"type": "item.completed", "item": {"id": "item_0", "type": "agent_message",
                                                 "text": "Done."}},
             {"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 2}})
    reading = read("codex", out, 0)
    assert reading.result_text == "Done."
    assert not reading.is_error


def test_opencode_real_error_shape() -> None:
    out = jl({"type": "step_start", "sessionID": "ses_1", "part": {"type": "step-start"}},
             {"type": "error", "timestamp": 2, "sessionID": "ses_1",
              "error": {"name": "APIError",
                        "data": {"message": "Claude AI usage limit reached|1767225600",
                                 "statusCode": 429, "isRetryable": False}}})
    reading = read("opencode", out, 1)
    assert reading.is_error
    assert reading.error is not None and "usage limit reached" in reading.error
    assert reading.rate_limited and reading.reset_at == 1767225600.0


def test_copilot_session_from_result_event() -> None:
    assert read("copilot", copilot_ok("PROBE-OK"), 0).session_id == "cp-sess"


def test_copilot_result_is_the_last_assistant_message_not_the_prompt_echo() -> None:
    reading = read("copilot", copilot_ok("PROBE-OK"), 0)
    assert reading.result_text == "PROBE-OK"
    assert "DONE" not in (reading.result_text or "")


# -- usage limits with reset times ---------------------------------------------------

LIMIT_PRESETS = [n for n in AGENTS if AGENT_OUTPUTS[n].fail is not None]


@pytest.mark.parametrize("name", LIMIT_PRESETS)
def test_usage_limit_with_epoch_reset(name: str) -> None:
    fail = AGENT_OUTPUTS[name].fail
    assert fail is not None
    reading = read(name, fail("Claude AI usage limit reached|1767225600"), 1)
    assert reading.rate_limited
    assert reading.reset_at == 1767225600.0


@pytest.mark.parametrize("name", LIMIT_PRESETS)
def test_usage_limit_with_wall_clock_reset(name: str, frozen: float) -> None:
    fail = AGENT_OUTPUTS[name].fail
    assert fail is not None
    reading = read(name, fail("You've hit your limit · resets 1pm (UTC)"), 1)
    assert reading.rate_limited
    assert reading.reset_at == NEXT_1PM


@pytest.mark.parametrize("name", LIMIT_PRESETS)
def test_plain_rate_limit_without_reset(name: str) -> None:
    fail = AGENT_OUTPUTS[name].fail
    assert fail is not None
    reading = read(name, fail("429 Too Many Requests: rate limit exceeded"), 1)
    assert reading.rate_limited and reading.reset_at is None


def test_claude_usage_limit_result_texts(frozen: float) -> None:
    out = jl(claude_result("Claude AI usage limit reached|1767225600", is_error=True))
    reading = read("claude", out, 0)
    assert reading.rate_limited and reading.reset_at == 1767225600.0
    out = jl(claude_result("You've hit your limit · resets 1pm", is_error=True))
    reading = read("claude", out, 1)
    assert reading.rate_limited and reading.reset_at == NEXT_1PM


@pytest.mark.parametrize("output", [
    b"curl: (22) The requested URL returned error: 429 Too Many Requests\n",
    b"ERROR: rate limit exceeded; usage limit reached|1767225600\n",
    b"You've hit your limit \xc2\xb7 resets 1pm\n",
])
def test_shell_and_command_output_is_never_a_rate_limit(output: bytes) -> None:
    for loop in (make_loop("shell"), command_loop("prog {prompt}")):
        log = log_header(loop, "curl -f https://example.invalid") + output
        reading = read_output(loop, log, log, 0)
        assert_reading_types(reading)
        assert not reading.rate_limited and reading.reset_at is None
        assert not reading.is_error
        assert reading.result_text == output.decode().strip()


# -- rate_limit() and next_wall_time() with fixed clocks -----------------------------


def test_next_wall_time_later_today(local_tz: Callable[[str], None]) -> None:
    local_tz(UTC)
    assert readers.next_wall_time(1, 0, "pm", NOW) == NEXT_1PM
    assert readers.next_wall_time(13, 0, None, NOW) == NEXT_1PM
    assert readers.next_wall_time(1, 30, "PM", NOW) == utc(2026, 1, 15, 13, 30, 0)
    assert readers.next_wall_time(12, 0, "pm", NOW) == utc(2026, 1, 15, 12, 0, 0)
    assert readers.next_wall_time(10, 1, None, NOW) == utc(2026, 1, 15, 10, 1, 0)


def test_next_wall_time_rolls_to_tomorrow(local_tz: Callable[[str], None]) -> None:
    local_tz(UTC)
    assert readers.next_wall_time(9, 0, "am", NOW) == utc(2026, 1, 16, 9, 0, 0)
    assert readers.next_wall_time(12, 0, "am", NOW) == utc(2026, 1, 16, 0, 0, 0)
    assert readers.next_wall_time(10, 0, None, NOW) == utc(2026, 1, 16, 10, 0, 0)  # == now
    at_1pm = utc(2026, 1, 15, 13, 0, 0)
    assert readers.next_wall_time(1, 0, "pm", at_1pm) == utc(2026, 1, 16, 13, 0, 0)
    late = utc(2026, 1, 15, 23, 59, 59)
    assert readers.next_wall_time(1, 0, "pm", late) == utc(2026, 1, 16, 13, 0, 0)


def test_next_wall_time_is_local_time(local_tz: Callable[[str], None]) -> None:
    local_tz(NEW_YORK)
    now = utc(2026, 1, 15, 15, 0, 0)  # 10:00 EST
    assert readers.next_wall_time(1, 0, "pm", now) == utc(2026, 1, 15, 18, 0, 0)


def test_next_wall_time_across_a_dst_change(local_tz: Callable[[str], None]) -> None:
    local_tz(NEW_YORK)
    now = utc(2026, 3, 7, 19, 0, 0)  # Sat 14:00 EST; clocks go forward on Sunday
    # Sunday 13:00 is EDT: 17:00 UTC, 23 hours later, not now + 1 day at 18:00 UTC.
    assert readers.next_wall_time(1, 0, "pm", now) == utc(2026, 3, 8, 17, 0, 0)


@pytest.mark.parametrize(("text", "expected"), [
    ("Claude AI usage limit reached|1767225600", (True, 1767225600.0)),
    ("You've hit your limit · resets 1pm", (True, NEXT_1PM)),
    ("You've hit your limit · resets 1pm (Europe/Lisbon)", (True, NEXT_1PM)),
    ("You've hit your limit · resets 3:30am (Europe/Moscow)",
     (True, utc(2026, 1, 16, 3, 30, 0))),
    ("Claude usage limit reached. Your limit will reset at 5pm (Europe/Warsaw).",
     (True, utc(2026, 1, 15, 17, 0, 0))),
    ("API Error: Request rejected (429) · rate limit", (True, None)),
    ("429 Too Many Requests", (True, None)),
    ("RESOURCE_EXHAUSTED: Quota exceeded", (True, None)),
    ("all tests pass", (False, None)),
    ("", (False, None)),
    ("resets 1pm", (False, None)),  # a time alone is not a limit
])
def test_rate_limit_texts(text: str, expected: tuple[bool, float | None],
                          local_tz: Callable[[str], None]) -> None:
    local_tz(UTC)
    assert readers.rate_limit(text, now=NOW) == expected


def test_rate_limit_date_form_never_guesses_a_wrong_time(
        local_tz: Callable[[str], None]) -> None:
    local_tz(UTC)
    limited, reset = readers.rate_limit(
        "You've hit your limit · resets Jan 30, 11:30am (Asia/Calcutta)", now=NOW)
    assert limited
    assert reset in (None, utc(2026, 1, 30, 11, 30, 0))


def test_rate_limit_claude_session_limit(local_tz: Callable[[str], None]) -> None:
    local_tz(UTC)
    text = "You've hit your session limit · resets 12:50pm (America/Los_Angeles)"
    assert readers.rate_limit(text, now=NOW) == (True, utc(2026, 1, 15, 12, 50, 0))


def test_rate_limit_codex_try_again_at(local_tz: Callable[[str], None]) -> None:
    local_tz(UTC)
    text = ("You've hit your usage limit. To get more access now, send a request to your "
            "admin or try again at 12:16 PM.")
    assert readers.rate_limit(text, now=NOW) == (True, utc(2026, 1, 15, 12, 16, 0))


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=200))
def test_rate_limit_never_raises(text: str) -> None:
    limited, reset = readers.rate_limit(text, now=NOW)
    assert isinstance(limited, bool)
    assert reset is None or (limited and isinstance(reset, float))


# -- the run log's header ------------------------------------------------------------


@pytest.mark.parametrize("name", AGENTS)
def test_header_only_log(name: str) -> None:
    reading = read(name, b"", None)
    assert reading.result_text is None
    assert reading.session_id is None and reading.cost_usd is None
    assert not reading.rate_limited




@pytest.mark.parametrize("name", ["aider", "crush", "shell"])
def test_multiline_prompt_in_header_is_not_output(name: str) -> None:
    prompt = "Fix the parser.\nAlso handle HTTP 429 rate limit errors.\nSay DONE when finished."
    reading = read(name, b"Applied edit to parser.py\n", 0, prompt=prompt)
    assert reading.result_text == "Applied edit to parser.py"
    assert not reading.rate_limited


def test_multiline_prompt_in_header_is_not_a_gemini_result() -> None:
    prompt = 'Answer in JSON like\n{"response": "DONE"}\nand nothing else.'
    reading = read("gemini", b"Error: fetch failed\n", 1, prompt=prompt)
    assert reading.result_text != "DONE"


# -- large outputs: head and tail differ ---------------------------------------------


def test_codex_session_is_read_from_the_head() -> None:
    loop = make_loop("codex")
    head = log_header(loop, "x") + jl({"type": "thread.started", "thread_id": "t-head"},
                                      {"type": "turn.started"})
    tail = b'put": "truncated line\n' + jl(
        {"type": "item.completed", "item": {"type": "agent_message", "text": "final"}},
        {"type": "turn.completed", "usage": {}})
    reading = read_output(loop, head, tail, 0)
    assert reading.session_id == "t-head" and reading.result_text == "final"


def test_pi_session_is_read_from_the_head() -> None:
    loop = make_loop("pi")
    full = pi_out("final answer")
    lines = full.splitlines(keepends=True)
    head, tail = log_header(loop, "x") + lines[0], b"ncated event\n" + lines[-1]
    reading = read_output(loop, head, tail, 0)
    assert reading.session_id == "pi-sess-1" and reading.result_text == "final answer"
    assert reading.cost_usd == pytest.approx(0.01)


def test_claude_result_at_the_end_of_a_long_log() -> None:
    loop = make_loop("claude")
    noise = b"".join(b"warning: %d\n" % i for i in range(2000))
    out = noise + sample("claude-2.1.328-result-success.json")
    reading = read_output(loop, log_header(loop, "x") + noise[:100], out[-5000:], 0)
    assert reading.result_text == "STUB-OK: nothing to do"


def test_gemini_pretty_json_followed_by_a_stderr_line() -> None:
    out = gemini_out(response="the answer") + b"(node:4242) Warning: something minor\n"
    assert read("gemini", out, 0).result_text == "the answer"


# -- missing fields, garbage, empty output -------------------------------------------

GARBAGE = [
    b"",
    b"\n\n  \n",
    b"\x00\xff\xfe binary \x80 garbage",
    b"{not json",
    b'{"type": "result", "result": "trunc',
    b"Segmentation fault (core dumped)\n",
    b"null\n",
    b"42\n",
    b'"a string"\n',
    b"[]\n",
    b"[1, 2, 3]\n",
    b"{}\n",
    b"[{}]\n",
    b"{\n",
]


@pytest.mark.parametrize("output", GARBAGE, ids=range(len(GARBAGE)))
@pytest.mark.parametrize("name", ALL)
def test_garbage_never_raises(name: str, output: bytes) -> None:
    for exit_code in (0, 1, None):
        reading = read(name, output, exit_code)
        assert not reading.rate_limited and reading.reset_at is None
        assert reading.cost_usd is None


MISSING_FIELDS: dict[str, bytes] = {
    "claude": jl({"type": "result"}),
    "cursor": jl({"type": "result", "subtype": "success"}),
    "amp": jl({"type": "system"}, {"type": "result"}),
    "qwen": b'[{"type": "result"}]\n',
    "codex": jl({"type": "thread.started"}, {"type": "item.completed"},
                {"type": "item.completed", "item": {"type": "agent_message"}},
                {"type": "turn.completed"}),
    "gemini": gemini_out(),
    "opencode": jl({"type": "step_start"}, {"type": "text"}, {"type": "text", "part": {}},
                   {"type": "step_finish"}),
    "pi": jl({"type": "session"}, {"type": "agent_end"},
             {"type": "agent_end", "messages": [{"role": "assistant"}]}),
    "goose": b'{"messages": [], "metadata": {}}\n',
    "copilot": jl({"type": "assistant.message"}, {"type": "result"}),
    "aider": b"\n",
    "crush": b"\n",
}


@pytest.mark.parametrize("name", AGENTS)
def test_missing_fields(name: str) -> None:
    reading = read(name, MISSING_FIELDS[name], 0)
    assert reading.cost_usd is None
    assert not reading.rate_limited and reading.reset_at is None
    if name != "copilot":  # copilot falls back to the raw output as its text
        assert not reading.result_text  # nothing was said


def test_missing_fields_table_is_complete() -> None:
    assert set(MISSING_FIELDS) == set(AGENTS)


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("output", GARBAGE, ids=range(len(GARBAGE)))
def test_each_reader_function_on_garbage(reader: str, output: bytes) -> None:
    for exit_code in (0, 2, None):
        assert_reading_types(READERS[reader](output, output, exit_code))


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300))
def test_readers_never_raise_on_arbitrary_bytes(data: bytes) -> None:
    for reader in READERS.values():
        assert_reading_types(reader(data, data, 0))


WRONG_TYPES = [
    ("codex", jl({"type": "item.completed", "item": "not an object"})),
    ("codex", jl({"type": "turn.failed", "error": "plain string"})),
    ("codex", jl({"type": "thread.started", "thread_id": 12345})),
    ("codex", b'{"type": null}\n'),
    ("opencode", jl({"type": "text", "sessionID": "s", "part": "not an object"})),
    ("opencode", jl({"type": "step_start", "sessionID": 12345})),
    ("pi", jl({"type": "agent_end", "messages": 5})),
    ("pi", jl({"type": "agent_end", "messages": [{"role": "assistant", "usage": 5}]})),
    ("pi", jl({"type": "agent_end", "messages": [{"role": "assistant",
                                                    "usage": {"cost": 5}}]})),
    ("pi", jl({"type": "agent_end", "messages": [
        {"role": "assistant", "content": [{"type": "text", "text": 5}]}]})),
    ("pi", jl({"type": "session", "id": 12345})),
    ("goose", b'{"messages": 5}\n'),
    ("goose", b'{"result": null, "metadata": 1}\n'),
    ("gemini", b'{"session_id": 12345, "response": "x"}\n'),
    ("copilot", jl({"type": "result", "sessionId": 12345})),
]
WELL_TYPED = [
    ("claude", jl({"type": "result", "result": 5, "session_id": 5, "total_cost_usd": "1",
                   "is_error": "yes", "error": 5})),
    ("qwen", b'[{"type": "result", "result": ["x"], "session_id": {}}]\n'),
    ("gemini", b'{"response": 5, "error": 5}\n'),
    ("goose", b'{"messages": [5, {"role": "assistant", "content": 5}], '
              b'"metadata": {"cost_usd": "x", "status": 5}}\n'),
    ("codex", jl({"type": "error"}, {"type": "turn.failed"})),
    ("opencode", jl({"type": "error", "error": "plain string"})),
    ("copilot", jl({"type": "assistant.message", "content": {"x": 1}})),
]


@pytest.mark.parametrize(("name", "output"), [
    *[pytest.param(n, o,
                   id=f"{n}-bug-{i}") for i, (n, o) in enumerate(WRONG_TYPES)],
    *[pytest.param(n, o, id=f"{n}-ok-{i}") for i, (n, o) in enumerate(WELL_TYPED)],
])
def test_wrong_typed_fields(name: str, output: bytes) -> None:
    read(name, output, 0)  # read() checks that every field has its declared type


_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**10),
                       st.floats(allow_nan=False), st.text(max_size=12))
_keys = st.sampled_from(["type", "result", "session_id", "total_cost_usd", "is_error",
                         "subtype", "error", "message", "item", "text", "thread_id",
                         "response", "part", "sessionID", "messages", "role", "content",
                         "usage", "cost", "total", "metadata", "cost_usd", "status",
                         "stopReason", "errorMessage", "id", "sessionId", "data",
                         "api_error_status", "api_error_type"])
_types = st.sampled_from(["result", "thread.started", "item.completed", "turn.failed", "error",
                          "text", "step_start", "session", "agent_end", "assistant.message",
                          "message"])
_json = st.recursive(
    _json_leaf | _types,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(_keys, children, max_size=5),
    max_leaves=25,
)


# 100 derandomized examples: the parametrized garbage above covers the edges.
@settings(max_examples=100, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(events=st.lists(_json, min_size=1, max_size=4))
def test_readers_never_raise_on_odd_json(events: list[Any]) -> None:
    data = jl(*events)
    for reader in READERS.values():
        assert_reading_types(reader(data, data, 0))
