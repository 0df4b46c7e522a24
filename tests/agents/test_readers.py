"""Agent output readers: what a run's log says (DESIGN §6; issue 4): the
result text, session and cost of a success for every preset, errors reported
with exit 0, each agent's own error shapes, the supervisor's header line in the
log, large logs whose head and tail differ, and output that is garbage, lacks
fields or has fields of the wrong type (the readers never raise).

Sample outputs: tests/samples/ holds real Claude Code 2.1.328 results (see
tests/samples/README.md); the others are built in agents_support.py from each
CLI's documented machine-readable format.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from agents_support import (
    AGENT_OUTPUTS,
    AGENTS,
    ALL,
    assert_reading_types,
    claude_result,
    copilot_ok,
    gemini_out,
    goose_out,
    jl,
    log_header,
    make_loop,
    opencode_ok,
    pi_out,
    read,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import TESTS
from loopctl.agents import readers
from loopctl.agents.presets import read_output
from loopctl.agents.readers import READERS

SAMPLES = TESTS / "samples"


def sample(name: str) -> bytes:
    return (SAMPLES / name).read_bytes()


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
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
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
