"""Bounds that hold against the agent's own words (DESIGN §18): only the
CLI's own fields hold an account; deferrals are bounded and charged; the
fallback takes the fires of the loop whose own run hit the limit; a held
loop says so everywhere; a budget that only estimates can reach is named.

Stand-in `claude`, `codex` and `aider` binaries answer, run by run, with what
the real CLIs print (Claude Code's captured results in tests/samples, codex
`exec --json` events, aider's plain text); every run is a real supervisor
started by a real `loopctl run` or `tick`. Time moves with
LOOPCTL_CLOCK_OFFSET, never with sleeps.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import CLI, TESTS
from loopctl.domain.timestamps import parse_iso

SAMPLES = TESTS / "samples"

FAKE = """#!{python}
import json, os, sys, time
here = {folder!r}
agent = os.path.basename(sys.argv[0])
if not sys.stdin.isatty():
    sys.stdin.read()
with open(os.path.join(here, "launches.jsonl"), "a") as f:
    f.write(json.dumps({{"agent": agent, "loop": os.environ.get("LOOPCTL_LOOP")}}) + "\\n")
with open(os.path.join(here, agent + ".out")) as f:
    out = f.read()
now = int(time.time())
out = out.replace("@IN2S@", str(now + 2)).replace("@IN7D@", str(now + 7 * 86400))
sys.stdout.write(out)
sys.stdout.flush()
with open(os.path.join(here, agent + ".code")) as f:
    sys.exit(int(f.read()))
"""


def sample(name: str, **changes: Any) -> str:
    data = json.loads((SAMPLES / name).read_text())
    data.update(changes)
    return json.dumps(data) + "\n"


CLAUDE_OK = sample("claude-2.1.328-result-success.json", total_cost_usd=0.4)
CLAUDE_429 = sample("claude-2.1.328-result-rate-limited-429.json")
CLAUDE_NO_LOGIN = sample("claude-2.1.197-result-not-logged-in.json")
# Claude Code's answer to a plan's usage limit: an error result whose text is
# "Claude AI usage limit reached|<epoch>"; this one reports no cost.
CLAUDE_LIMIT = json.dumps({
    "type": "result", "subtype": "success", "is_error": True, "num_turns": 1,
    "result": "Claude AI usage limit reached|@IN2S@",
    "session_id": "6cd62252-f82a-472c-a6c9-d80816335b62"}) + "\n"
CODEX_OK = "".join(json.dumps(e) + "\n" for e in (
    {"type": "thread.started", "thread_id": "0199a213-81c0-7800-8aa1-bbab2a035a53"},
    {"type": "turn.started"},
    {"type": "item.completed", "item": {"id": "item_0", "type": "agent_message",
                                        "text": "codex did it"}},
    {"type": "turn.completed", "usage": {"input_tokens": 2431, "cached_input_tokens": 0,
                                         "output_tokens": 12}}))
AIDER_BANNER = ("Aider v0.86.1\nMain model: anthropic/claude-sonnet-4-20250514 with diff "
                "edit format\nRepo-map: using 4096 tokens, auto refresh\n")


def codex_limit(reset_local: str) -> str:
    message = ("You've hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro)"
               f" or try again at {reset_local}.")
    return "".join(json.dumps(e) + "\n" for e in (
        {"type": "thread.started", "thread_id": "0199a213-81c0-7800-8aa1-bbab2a035a54"},
        {"type": "turn.started"}, {"type": "error", "message": message},
        {"type": "turn.failed", "error": {"message": message}}))


class Agents:
    """The stand-ins' folder: what each answers next, and who was launched."""

    def __init__(self, tmp_path: Path) -> None:
        self.folder = tmp_path / "agent-bin"
        self.folder.mkdir()
        for agent in ("claude", "codex", "aider"):
            script = self.folder / agent
            script.write_text(FAKE.format(python=sys.executable, folder=str(self.folder)))
            script.chmod(0o755)
        self.env = {"PATH": f"{self.folder}{os.pathsep}{os.environ['PATH']}"}

    def answer(self, agent: str, output: str, code: int) -> None:
        (self.folder / f"{agent}.out").write_text(output)
        (self.folder / f"{agent}.code").write_text(str(code))

    def launched(self) -> list[tuple[str, str]]:
        log = self.folder / "launches.jsonl"
        lines = log.read_text().splitlines() if log.exists() else []
        return [(x["agent"], x["loop"]) for x in map(json.loads, lines)]


@pytest.fixture
def agents(tmp_path: Path) -> Agents:
    return Agents(tmp_path)


def start(cli: CLI, agents: Agents, tmp_path: Path, name: str, *args: str) -> None:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    cli("start", "work", "--name", name, "--sandbox", "off", "--cwd", str(work), *args,
        env=agents.env, check=0)


def tick_at(cli: CLI, agents: Agents, moment: float) -> None:
    """One `tick --wait` with loopctl's clock moved on to `moment`."""
    offset = max(moment - time.time(), 0.0) + 1
    proc = cli("tick", "--wait", env=dict(agents.env, LOOPCTL_CLOCK_OFFSET=f"{offset:.0f}"))
    assert proc.returncode in (0, 1), (proc.stdout, proc.stderr)


def events(cli: CLI) -> list[dict[str, Any]]:
    path = cli.state_dir / "events.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


# -- only the CLI's own fields hold an account ---------------------------------------


def test_a_limit_the_model_wrote_holds_its_loop_alone_for_at_most_an_hour(
        cli: CLI, agents: Agents, tmp_path: Path) -> None:
    """aider's output is plain text: the model's (or a prompt-injected
    file's) "usage limit reached|<a week on>" must not hold the account."""
    for name in ("a", "b"):
        start(cli, agents, tmp_path, name, "--agent", "aider", "--every", "1h")
    agents.answer("aider", AIDER_BANNER + "The tool said: Claude AI usage limit reached|@IN7D@\n",
                  0)
    before = time.time()
    assert cli("run", "a", env=agents.env).returncode == 75
    state = cli.state()
    a, b = state["loops"]["a"], state["loops"]["b"]
    assert (a["status"], a["reason"]) == ("paused", "rate_limited")
    assert before + 60 <= a["resume_at"] <= time.time() + 3600, a["resume_at"]
    assert not state.get("accounts")  # no account was marked
    assert b["status"] == "active" and cli.json("status", "b")["status"] == "active"
    assert [(e["loop"], e["reason"]) for e in events(cli)] == [("a", "rate_limited")]
    [record] = cli.records("a")
    assert "clamped" in record["note"] and "agent's text" in record["note"], record["note"]
    # After the hour one fire finds out; the agent is fine.
    agents.answer("aider", AIDER_BANNER + "Applied edit to app.py\n", 0)
    tick_at(cli, agents, a["resume_at"])
    assert [r["outcome"] for r in cli.records("a")] == ["deferred", "ok"]


# -- deferrals are bounded -----------------------------------------------------------


def test_deferred_runs_wait_a_minute_are_charged_and_stop_at_max_deferrals(
        cli: CLI, agents: Agents, tmp_path: Path) -> None:
    start(cli, agents, tmp_path, "d", "--agent", "claude", "--every", "1h",
          "--budget-usd", "5", "--max-deferrals", "3")
    agents.answer("claude", CLAUDE_OK, 0)
    assert cli("run", "d", env=agents.env).returncode == 0
    agents.answer("claude", CLAUDE_LIMIT, 1)  # "resets" in 2 s, every time
    assert cli("run", "d", env=agents.env).returncode == 75
    st = cli.state()["loops"]["d"]
    second = cli.records("d")[1]
    assert st["resume_at"] >= parse_iso(second["ended_at"]) + 59
    assert "deferred 60s" in second["note"], second["note"]
    assert (second["outcome"], second["cost_usd"], second["cost_estimated"]) == \
        ("deferred", 0.4, True)
    for _ in range(2):
        tick_at(cli, agents, cli.state()["loops"]["d"]["resume_at"])
    st = cli.state()["loops"]["d"]
    assert (st["status"], st["reason"], st["deferrals"]) == ("paused", "deferral_limit", 3)
    assert [e["reason"] for e in events(cli)][-1] == "deferral_limit"
    assert st["cost_usd"] == pytest.approx(1.6)  # $0.40 read, three estimates
    tick_at(cli, agents, time.time() + 86400)
    assert len(agents.launched()) == 4  # paused: nothing more runs
    status = cli("status", "d", env=agents.env, check=0).stdout
    assert "cost       at least $1.60 of $5.00" in status, status
    assert "deferrals  3 in a row (pauses at 3)" in status, status
    assert cli.json("show", "d")["definition"]["max_deferrals"] == 3
    cli("update", "d", "--max-deferrals", "0", check=0)
    assert "max_deferrals" in cli.json("show", "d")["definition"]


def test_a_zero_cost_from_a_run_that_used_tokens_is_not_believed(
        cli: CLI, agents: Agents, tmp_path: Path) -> None:
    start(cli, agents, tmp_path, "z", "--agent", "claude", "--every", "1h",
          "--budget-usd", "5")
    agents.answer("claude", CLAUDE_OK, 0)
    cli("run", "z", env=agents.env, check=0)
    # The success sample used 15 tokens; a final line says it cost nothing.
    agents.answer("claude", sample("claude-2.1.328-result-success.json", total_cost_usd=0), 0)
    cli("run", "z", env=agents.env, check=0)
    second = cli.records("z")[1]
    assert (second["cost_usd"], second["cost_estimated"]) == (0.4, True), second
    assert "tokens used" in second["note"]
    status = cli.json("status", "z")
    assert status["cost_usd"] == {"spent": 0.8, "budget": 5.0, "estimated": True}


# -- the fallback takes the fires of the loop that hit the limit -----------------------


def test_the_loop_that_hit_the_limit_runs_its_fallback_then_its_own_agent(
        cli: CLI, agents: Agents, tmp_path: Path) -> None:
    start(cli, agents, tmp_path, "fb", "--agent", "claude", "--fallback-agent", "codex",
          "--every", "2m")
    agents.answer("claude", CLAUDE_429, 1)
    agents.answer("codex", CODEX_OK, 0)
    assert cli("run", "fb", env=agents.env).returncode == 75
    state = cli.state()
    st = state["loops"]["fb"]
    [mark] = state["accounts"].values()
    assert st["status"] == "active" and st["next_due"] < mark["until"], (st, mark)
    assert "codex" in cli.json("status", "fb")["note"]
    tick_at(cli, agents, st["next_due"])  # on its schedule, before the reset
    ran = cli.records("fb")[-1]
    assert (ran["agent"], ran["fallback_from"], ran["outcome"], ran["result"]) == \
        ("codex", "claude", "ok", "codex did it")
    agents.answer("claude", CLAUDE_OK, 0)
    tick_at(cli, agents, max(mark["until"], cli.state()["loops"]["fb"]["next_due"]))
    ran = cli.records("fb")[-1]
    assert (ran["agent"], ran.get("fallback_from"), ran["outcome"]) == ("claude", None, "ok")
    assert agents.launched() == [("claude", "fb"), ("codex", "fb"), ("claude", "fb")]


def test_a_refused_login_runs_the_fallback_until_the_login_is_fixed(
        cli: CLI, agents: Agents, tmp_path: Path) -> None:
    start(cli, agents, tmp_path, "fb", "--agent", "claude", "--fallback-agent", "codex",
          "--every", "2m")
    agents.answer("claude", CLAUDE_NO_LOGIN, 1)
    agents.answer("codex", CODEX_OK, 0)
    assert cli("run", "fb", env=agents.env).returncode == 1
    assert cli.records("fb")[0]["outcome"] == "auth_error"
    assert cli.state()["loops"]["fb"]["status"] == "active"
    tick_at(cli, agents, cli.state()["loops"]["fb"]["next_due"])
    assert (cli.records("fb")[-1]["agent"], cli.records("fb")[-1]["fallback_from"]) == \
        ("codex", "claude")
    # Logged in again: `resume` lets the loop's own agent find out.
    agents.answer("claude", CLAUDE_OK, 0)
    cli("resume", "fb", check=0)
    tick_at(cli, agents, cli.state()["loops"]["fb"]["next_due"])
    assert (cli.records("fb")[-1]["agent"], cli.records("fb")[-1]["outcome"]) == \
        ("claude", "ok")
    assert not cli.state()["accounts"]


def test_a_fallback_limited_too_holds_the_loop_with_both_reasons(
        cli: CLI, agents: Agents, tmp_path: Path) -> None:
    start(cli, agents, tmp_path, "fb", "--agent", "claude", "--fallback-agent", "codex",
          "--every", "2m")
    agents.answer("claude", CLAUDE_429, 1)
    reset = time.strftime("%I:%M %p", time.localtime(time.time() + 2 * 3600))
    agents.answer("codex", codex_limit(reset), 1)
    cli("run", "fb", env=agents.env, check=75)
    tick_at(cli, agents, cli.state()["loops"]["fb"]["next_due"])
    state = cli.state()
    st = state["loops"]["fb"]
    claude_until = min(m["until"] for m in state["accounts"].values())
    assert (st["status"], st["reason"], st["resume_at"]) == \
        ("paused", "rate_limited", claude_until)  # the first of the two resets
    status = cli("status", "fb", env=agents.env, check=0).stdout
    assert "held (rate_limited) until" in status, status
    assert "claude account is rate-limited" in status and "codex account" in status, status


# -- a held loop says so everywhere ---------------------------------------------------


def test_a_loop_of_a_marked_account_shows_held_with_the_fix(
        cli: CLI, agents: Agents, tmp_path: Path) -> None:
    start(cli, agents, tmp_path, "a", "--agent", "claude", "--every", "1h")
    agents.answer("claude", CLAUDE_NO_LOGIN, 1)
    cli("run", "a", env=agents.env, check=1)
    # Made after the mark, not yet due: its account holds it all the same.
    start(cli, agents, tmp_path, "c", "--agent", "claude", "--every", "1h", "--after", "1h")
    listing = cli("ls", env=agents.env, check=0).stdout
    row = next(ln for ln in listing.splitlines() if ln.startswith("c "))
    assert "held (auth_required)" in row and "claude /login" in row, listing
    status = cli("status", "c", env=agents.env, check=0).stdout
    assert "c: held (auth_required)" in status and "claude /login" in status, status
    assert "loopctl resume c" in status
    [c] = [x for x in cli.json("ls")["loops"] if x["name"] == "c"]
    assert (c["status"], c["reason"], c["held"]["kind"]) == \
        ("held", "auth_required", "auth_required")
    # The LOOP object's `held`, a record's JSON: its keys as they always were.
    assert list(c["held"]) == ["kind", "until", "presets", "fix", "note"]
    assert (c["held"]["until"], c["held"]["presets"]) == (None, ["claude"])
    watch = cli("watch", env=agents.env, timeout=15, check=0).stdout
    assert "held (auth_required)" in watch and "claude /login" in watch, watch
    # The loop whose own run failed keeps that run's reason in LAST (issue 51 item 10).
    [a] = [x for x in cli.json("ls")["loops"] if x["name"] == "a"]
    own = a["last_run"]["reason"]
    assert own and "claude /login" not in own
    wide = cli("ls", env={**agents.env, "COLUMNS": "400"}).stdout
    row = next(ln for ln in wide.splitlines() if ln.startswith("a "))
    assert f"{a['last_run']['outcome']}: {own}" in row, row


# -- a budget only estimates can reach ------------------------------------------------


def test_a_budget_on_a_loop_that_reports_no_cost_is_warned_about(cli: CLI) -> None:
    shell = cli("start", "--name", "s", "--every", "1h", "--budget-usd", "1", "echo hi")
    assert shell.returncode == 0
    assert "shell preset reports no cost" in shell.stderr, shell.stderr
    assert "claude, goose, pi" in shell.stderr
    command = cli("start", "--name", "k", "--every", "1h", "--budget-usd", "1",
                  "--command", "prog {prompt}", "p")
    assert "a --command loop reports no cost" in command.stderr, command.stderr
    counted = cli("start", "--name", "c", "--every", "1h", "--agent", "claude",
                  "--budget-usd", "1", "p")
    assert "reports no cost" not in counted.stderr
    plain = cli("start", "--name", "n", "--every", "1h", "echo hi")
    assert "reports no cost" not in plain.stderr
    assert "reports no cost" in cli("update", "n", "--budget-usd", "2").stderr


# -- the rules, with a fixed clock -----------------------------------------------------

NOW = 1_800_000_000.0


def read(reader: str, output: str | bytes, code: int) -> Any:
    from loopctl.agents.readers import READERS

    data = output.encode() if isinstance(output, str) else output
    return READERS[reader](data, data, code)


@pytest.mark.parametrize(("reader", "output", "code", "limited"), [
    ("claude", CLAUDE_429, 1, True),  # the CLI's api_error_status
    ("claude", CLAUDE_LIMIT.replace("@IN2S@", "1767225600"), 1, True),  # its is_error result
    # The model's own final text, however it reads, is not the CLI's error.
    ("claude", sample("claude-2.1.328-result-success.json",
                      result="Claude AI usage limit reached|1767225600 Not logged in"), 0, False),
    ("codex", CODEX_OK.replace("codex did it", "usage limit reached|1767225600; 401 "
                               "Unauthorized: not logged in"), 0, False),
    ("codex", codex_limit("3:05 PM"), 1, True),
    ("gemini", json.dumps({"session_id": "s", "response": "429 Too Many Requests: usage "
                           "limit reached|1767225600; API key not valid", "stats": {}}), 0,
     False),
])
def test_structured_readers_read_only_the_clis_fields(reader: str, output: str, code: int,
                                                      limited: bool) -> None:
    reading = read(reader, output, code)
    assert reading.rate_limited == limited and not reading.auth_error, reading
    assert not reading.from_text  # what they found holds the account


def test_a_limit_found_in_free_text_is_marked_as_such() -> None:
    text = AIDER_BANNER + "litellm.RateLimitError: usage limit reached|1767225600\n"
    assert read("text", text, 1).from_text and read("text", text, 1).rate_limited
    login = AIDER_BANNER + "litellm.AuthenticationError: invalid api key\n"
    assert read("text", login, 1).from_text and read("text", login, 1).auth_error
    # A structured preset whose output was no JSON of its own: free text too.
    assert read("claude", "Claude AI usage limit reached|1767225600\n", 1).from_text
    assert not read("text", AIDER_BANNER + "all done\n", 0).from_text


def test_a_deferral_is_at_least_a_minute_and_at_most_its_bound() -> None:
    from fixed_zone import UTC

    from loopctl.domain.model import LoopDef
    from loopctl.domain.state import new_loop_state
    from loopctl.domain.valves import deferral_end

    def end(reset: float | None, loop_only: bool = False) -> tuple[float, str | None]:
        return deferral_end(new_loop_state(LoopDef(name="l"), NOW, zone=UTC), reset, NOW,
                            loop_only)

    assert end(NOW + 2) == (NOW + 60, end(NOW + 2)[1]) and "60s" in str(end(NOW + 2)[1])
    assert end(NOW + 600) == (NOW + 600, None)
    until, note = end(NOW - 5)  # already past: the backoff, said so
    assert until == NOW + 300 and "has passed" in str(note)
    until, note = end(NOW + 30 * 86400)
    assert until == NOW + 7 * 86400 and "clamped" in str(note)
    until, note = end(NOW + 7 * 86400, loop_only=True)
    assert until == NOW + 3600 and "agent's text" in str(note)
    assert end(None, loop_only=True) == (NOW + 300, None)


def test_a_reset_years_away_or_not_a_time_is_noted() -> None:
    import math

    from loopctl.agents.readers import Reading, sanitized

    far = sanitized(Reading(rate_limited=True, reset_at=NOW + 3 * 365 * 86400), NOW)
    assert far.reset_at == NOW + 7 * 86400 and "held to a week" in far.notes[0]
    nan = sanitized(Reading(rate_limited=True, reset_at=math.nan), NOW)
    assert nan.reset_at is None and "dropped" in nan.notes[0]


def test_tokens_used_at_no_cost_are_charged_the_estimate() -> None:
    from fixed_zone import UTC

    from loopctl.domain import valves
    from loopctl.domain.model import parse_loop
    from loopctl.domain.state import new_loop_state

    loop = parse_loop("l", {"prompt": "p", "every": "1m", "agent": "claude", "budget_usd": 5})
    st = new_loop_state(loop, NOW, zone=UTC)
    assert valves.charge(loop, st, "ok", 0.4) is None
    assert valves.charge(loop, st, "ok", 0.0, tokens=0) is None  # nothing used: free
    assert not st.cost_estimated
    assert valves.charge(loop, st, "ok", 0.0, tokens=15) == 0.4
    assert valves.charge(loop, st, "deferred", None) == 0.4
    assert st.cost_usd == pytest.approx(1.2) and st.cost_estimated


@pytest.mark.parametrize("value", [-1, 1.5, "10", True, float("nan"), 10**10])
def test_a_bad_max_deferrals_in_loops_yaml_is_refused_in_one_line(value: Any) -> None:
    from loopctl.domain.errors import UsageError
    from loopctl.domain.loop_raw import to_raw
    from loopctl.domain.model import parse_loop

    raw = {"prompt": "p", "every": "1h", "agent": "claude"}
    with pytest.raises(UsageError) as caught:
        parse_loop("l", dict(raw, max_deferrals=value))
    assert "max_deferrals" in caught.value.message and "\n" not in caught.value.message
    assert parse_loop("l", raw).max_deferrals == 10  # the default, left out of the file
    assert "max_deferrals" not in to_raw(parse_loop("l", raw))
    assert to_raw(parse_loop("l", dict(raw, max_deferrals=0)))["max_deferrals"] == 0
