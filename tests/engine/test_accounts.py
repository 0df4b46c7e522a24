"""Accounts (DESIGN §18): loops of one preset and one set of credentials
share an account; a refused login or a usage limit seen by one run holds
them all, with one attention event, and a fallback agent takes the fires.

Pure rules first (domain/accounts.py, the readers), then one scenario with
real `loopctl` processes and stand-in `claude`/`gemini` binaries.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import CLI, TESTS
from loopctl.agents import readers
from loopctl.domain import accounts
from loopctl.domain.errors import UsageError
from loopctl.domain.model import parse_loop

SAMPLES = TESTS / "samples"
KEY = b"k" * 32
NOW = 1_800_000_000.0


def sample(name: str) -> bytes:
    return (SAMPLES / name).read_bytes()


def claude_id(env: dict[str, str], home: str = "/home/me", key: bytes = KEY) -> str:
    src = accounts.source("claude")
    return accounts.account_id(key, "claude", accounts.material(src, env, home))


# -- who shares an account ---------------------------------------------------


def test_same_credentials_share_an_account_and_others_do_not() -> None:
    base = claude_id({"ANTHROPIC_API_KEY": "sk-ant-1"})
    assert base == claude_id({"ANTHROPIC_API_KEY": "sk-ant-1", "UNRELATED": "x"})
    # The config folder named by its variable is the HOME-derived default.
    assert base == claude_id({"ANTHROPIC_API_KEY": "sk-ant-1",
                              "CLAUDE_CONFIG_DIR": "/home/me//.claude/"})
    others = {
        claude_id({"ANTHROPIC_API_KEY": "sk-ant-2"}),
        claude_id({"ANTHROPIC_API_KEY": "sk-ant-1", "CLAUDE_CONFIG_DIR": "/srv/bot"}),
        claude_id({"ANTHROPIC_API_KEY": "sk-ant-1"}, home="/home/you"),
        claude_id({}),  # the login in ~/.claude, no key
        claude_id({"ANTHROPIC_API_KEY": "sk-ant-1"}, key=b"j" * 32),  # another home
    }
    assert base not in others and len(others) == 5
    # Length-safe: values cannot be shifted from one variable to the next.
    assert claude_id({"ANTHROPIC_API_KEY": "a", "ANTHROPIC_AUTH_TOKEN": "bc"}) != \
        claude_id({"ANTHROPIC_API_KEY": "ab", "ANTHROPIC_AUTH_TOKEN": "c"})


def test_the_id_is_keyed_and_never_holds_the_key() -> None:
    secret = "sk-ant-secret-value-1234567890"
    ident = claude_id({"ANTHROPIC_API_KEY": secret})
    assert len(ident) == accounts.ID_CHARS and secret not in ident
    assert all(c in "0123456789abcdef" for c in ident)


def test_a_huge_or_multiline_key_in_a_definition_is_refused_in_one_line() -> None:
    raw = {"prompt": "p", "every": "1h", "agent": "claude"}
    for value, expected in (("k" * 5000, "at most 4096"), ("sk-1\nsk-2", "line break"),
                            ("sk\x00", "NUL")):
        with pytest.raises(UsageError) as caught:
            parse_loop("a", dict(raw, env={"ANTHROPIC_API_KEY": value}))
        assert expected in caught.value.message and "\n" not in caught.value.message
    # Any other variable may hold what it likes; a key at the bound is a key.
    parse_loop("a", dict(raw, env={"NOTES": "a\nb", "ANTHROPIC_API_KEY": "k" * 4096}))
    # From the environment (bounded by the kernel) a value is hashed as it is.
    assert claude_id({"ANTHROPIC_API_KEY": "x\n" * 60000}) != claude_id({})


def test_fallback_agent_is_checked() -> None:
    raw = {"prompt": "p", "every": "1h", "agent": "claude"}
    assert parse_loop("a", dict(raw, fallback_agent="gemini")).fallback_agent == "gemini"
    for bad, expected in (("nope", "unknown fallback_agent"), ("shell", "unknown"),
                          ("claude", "the loop's own agent"), ("../x", "unknown")):
        with pytest.raises(UsageError, match=expected):
            parse_loop("a", dict(raw, fallback_agent=bad))
    with pytest.raises(UsageError, match="needs an agent preset"):
        parse_loop("a", {"prompt": "p", "every": "1h", "fallback_agent": "gemini"})


# -- the table of marks --------------------------------------------------------


def _mark(table: dict[str, Any], kind: str, loop: str, until: float | None,
          now: float = NOW) -> accounts.Marked:
    return accounts.mark(table, "a" * 24, kind, preset="claude", loop=loop, run_id="r",
                         until=until, error="e", fix="fix it", now=now)


def test_one_mark_per_account_and_reset() -> None:
    table: dict[str, Any] = {}
    assert _mark(table, accounts.RATE_LIMITED, "x", NOW + 60).new
    # The same limit seen by another run: no second event, the later reset wins.
    again = _mark(table, accounts.RATE_LIMITED, "y", NOW + 90, now=NOW + 1)
    assert not again.new and again.entry.until == NOW + 90
    assert again.entry.loops == ["x", "y"]
    # After the reset a new limit is a new event.
    assert _mark(table, accounts.RATE_LIMITED, "x", NOW + 500, now=NOW + 100).new
    # A login that fails after the user resumed a loop is news again.
    assert _mark(table, accounts.AUTH_REQUIRED, "x", None).new
    assert not _mark(table, accounts.AUTH_REQUIRED, "y", None).new
    accounts.probe(table, "y")
    assert _mark(table, accounts.AUTH_REQUIRED, "y", None).new


def test_verdict_holds_uses_the_fallback_and_lets_the_probe_through() -> None:
    table: dict[str, Any] = {}
    ids = {"claude": "a" * 24, "gemini": "b" * 24}
    _mark(table, accounts.AUTH_REQUIRED, "x", None)

    def verdict(name: str, fallback: str | None = None,
                now: float = NOW) -> accounts.Verdict:
        return accounts.verdict(table, name, "claude", fallback, ids.__getitem__, now)

    assert verdict("y").entry is table["a" * 24]
    assert verdict("y", "gemini") == accounts.Verdict(preset="gemini")
    accounts.probe(table, "x")
    assert verdict("x").entry is None and verdict("y").entry is not None
    # Both accounts held: nothing runs.
    accounts.mark(table, "b" * 24, accounts.RATE_LIMITED, preset="gemini", loop="z",
                  run_id="r", until=NOW + 60, error=None, fix="", now=NOW)
    assert verdict("y", "gemini").entry is not None
    assert verdict("y", "gemini", now=NOW + 61).preset == "gemini"  # its reset passed
    assert accounts.verdict({}, "y", "claude", None, lambda p: 1 / 0, NOW) == \
        accounts.Verdict()  # no marks: no id is worked out


def test_a_damaged_table_is_dropped_entry_by_entry() -> None:
    good = {"kind": "auth_required", "since": NOW, "until": None, "loops": ["a"],
            "preset": "claude", "fix": "f"}
    raw = {"a" * 24: good, "b" * 24: dict(good, kind="nope"),
           "c" * 24: dict(good, since=float("nan")), "d" * 24: dict(good, loops="a"),
           "../x": good, "e" * 24: [], "f" * 24: dict(good, until="soon")}
    raw.update({"1" * 24: dict(good, loops=["../x"]), "2" * 24: dict(good, preset="evil"),
                "3" * 24: dict(good, loops=["a\x1b[31m"])})
    assert list(accounts.clean_table(raw)) == ["a" * 24]
    assert accounts.clean_table([1]) == {} and accounts.clean_table(None) == {}
    # What a human is shown from it is one printable line.
    [entry] = accounts.clean_table({"a" * 24: dict(
        good, fix="run \x1b]52;c;evil\x07this\nnow", error="\u202eoops", probe="../x",
        run_id="--flag")}).values()
    assert entry.fix.isprintable() and "\x1b" not in entry.fix
    assert entry.error is not None and entry.error.isprintable()
    assert entry.probe is None and entry.run_id is None


# -- what each CLI says when it has no login (captured from the real CLIs) ---------

CODEX_401 = (b'{"type":"thread.started","thread_id":"01a2"}\n'
             b'{"type":"turn.started"}\n'
             b'{"type":"error","message":"unexpected status 401 Unauthorized: Incorrect API key '
             b'provided: stub-key., url: http://127.0.0.1:1/v1/responses"}\n'
             b'{"type":"turn.failed","error":{"message":"unexpected status 401 Unauthorized: '
             b'Incorrect API key provided: stub-key."}}\n')
GEMINI_401 = json.dumps({"session_id": "s", "error": {
    "type": "Error", "code": 401, "message": '{"error":{"code":401,"message":"API key not '
    'valid. Please pass a valid API key.","status":"UNAUTHENTICATED"}}'}}, indent=2).encode()
GEMINI_NO_AUTH = json.dumps({"session_id": "s", "error": {
    "type": "Error", "code": 41, "message": "Please set an Auth method in your "
    "/h/.gemini/settings.json or specify one of the following environment variables before "
    "running: GEMINI_API_KEY, GOOGLE_GENAI_USE_VERTEXAI, GOOGLE_GENAI_USE_GCA"}},
    indent=2).encode()
QWEN_401 = (json.dumps([{"type": "result", "subtype": "error_during_execution",
                         "session_id": "s", "is_error": True, "error": {
                             "message": "[API Error: 401 Incorrect API key provided: k.]"}}])
            + "\n" + json.dumps({"error": {"type": "AlreadyReportedError", "message":
                                 "[API Error: 401 Incorrect API key provided: k.]", "code": 1}},
                                indent=2)).encode()
QWEN_NO_AUTH = json.dumps([{"type": "result", "subtype": "error_during_execution",
                            "is_error": True, "error": {"message": "No auth type is selected. "
                            "Please configure an auth type (e.g. via settings or `--auth-type`) "
                            "before running in non-interactive mode."}}]).encode()
OPENCODE_401 = json.dumps({"type": "error", "sessionID": "ses_1", "error": {
    "name": "APIError", "data": {"message": "Incorrect API key provided: stub-key.",
                                 "statusCode": 401, "isRetryable": False}}}).encode()


@pytest.mark.parametrize(("reader", "output", "code"), [
    ("claude", "claude-2.1.197-result-invalid-key-401.json", 1),
    ("claude", "claude-2.1.197-result-not-logged-in.json", 1),
    ("codex", CODEX_401, 1), ("gemini", GEMINI_401, 1), ("gemini", GEMINI_NO_AUTH, 41),
    ("claude", QWEN_401, 1), ("claude", QWEN_NO_AUTH, 0), ("opencode", OPENCODE_401, 1),
])
def test_each_reader_knows_a_refused_login(reader: str, output: bytes | str, code: int) -> None:
    data = sample(output) if isinstance(output, str) else output
    reading = readers.READERS[reader](data, data, code)
    assert reading.auth_error and reading.is_error and not reading.rate_limited, reading


def test_a_rate_limit_or_a_result_about_keys_is_not_an_auth_error() -> None:
    limited = sample("claude-2.1.328-result-rate-limited-429.json")
    reading = readers.READERS["claude"](limited, limited, 1)
    assert reading.rate_limited and not reading.auth_error
    # The agent's own words (its result) are not searched: it may be fixing
    # the very code that prints "Invalid API key".
    ok = json.dumps({"type": "result", "subtype": "success", "is_error": False,
                     "result": "Fixed: the app said Not logged in / Invalid API key (401)."})
    assert not readers.READERS["claude"](ok.encode(), ok.encode(), 0).auth_error


# -- the whole scenario, with real loopctl processes ------------------------------

FAKE = """#!{python}
import json, os, sys
log = os.environ["FAKE_AGENT_LOG"]
with open(log, "a") as f:
    f.write(json.dumps({{"agent": {agent!r}, "loop": os.environ.get("LOOPCTL_LOOP"),
                        "argv": sys.argv[1:]}}) + "\\n")
good = os.environ.get("ANTHROPIC_API_KEY") == "good" or os.path.exists({fixed!r})
if {agent!r} == "gemini" or good:
    print(json.dumps({{"type": "result", "subtype": "success", "is_error": False,
                      "result": "done", "session_id": "sess-" + {agent!r},
                      "response": "done"}}))
    sys.exit(0)
sys.stdout.write(open({refused!r}).read())
sys.exit(1)
"""


def fake_agents(tmp_path: Path, refusal: str = "claude-2.1.197-result-not-logged-in.json"
                ) -> tuple[dict[str, str], Path, Path]:
    folder = tmp_path / "agent-bin"
    folder.mkdir()
    fixed = tmp_path / "logged-in"
    for agent in ("claude", "gemini"):
        script = folder / agent
        script.write_text(FAKE.format(python=sys.executable, agent=agent, fixed=str(fixed),
                                      refused=str(SAMPLES / refusal)))
        script.chmod(0o755)
    log = tmp_path / "agents.jsonl"
    env = {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}", "FAKE_AGENT_LOG": str(log)}
    return env, log, fixed


def launches(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_a_refused_login_holds_the_account_once_and_the_fallback_runs(
        cli: CLI, tmp_path: Path) -> None:
    env, log, fixed = fake_agents(tmp_path)
    # The stand-ins write their log outside the working directory.
    common = ("--every", "1h", "--agent", "claude", "--sandbox", "off", "--cwd", str(tmp_path))
    for name in ("a", "b", "c"):
        cli("start", "work", "--name", name, *common, "--continue-session", env=env, check=0)
    cli("start", "work", "--name", "other", *common, "--env", "ANTHROPIC_API_KEY=good",
        env=env, check=0)
    cli("start", "work", "--name", "fb", *common, "--continue-session",
        "--fallback-agent", "gemini", env=env, check=0)

    proc = cli("run", "a", env=env)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    [record] = cli.records("a")
    assert (record["outcome"], record["agent"]) == ("auth_error", "claude"), record
    state = cli.state()
    st = state["loops"]
    assert (st["a"]["status"], st["a"]["reason"], st["a"]["failures"]) == \
        ("paused", "auth_required", 0)
    # The account's idle loops are held at once; another account and a loop
    # with a fallback are not.
    assert [(st[n]["status"], st[n]["reason"]) for n in ("b", "c")] == \
        [("paused", "auth_required")] * 2
    assert st["other"]["status"] == st["fb"]["status"] == "active"
    assert "sk-" not in json.dumps(state["accounts"])  # no credential in clear
    [event] = [json.loads(x) for x in (cli.state_dir / "events.jsonl").read_text().splitlines()]
    assert event["reason"] == "auth_required" and event["account"]["loops"] == ["a", "b", "c"]
    assert "claude /login" in event["summary"] and "ANTHROPIC_API_KEY" in event["summary"]

    status = cli("status", "b", env=env, check=0).stdout
    assert "held (auth_required)" in status and "claude /login" in status, status
    doctor = json.loads(cli("doctor", "--json", env=env).stdout)
    assert not doctor["healthy"]
    [finding] = [f for f in doctor["findings"] if f["check"] == "accounts"]
    assert finding["level"] == "error" and "a, b, c" in finding["message"]

    proc = cli("tick", "--wait", env=env)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    ran = [(x["agent"], x["loop"]) for x in launches(log)]
    # One claude learnt of the missing login; the other account ran; the
    # fallback took fb's fire; b and c started nothing.
    assert sorted(ran) == [("claude", "a"), ("claude", "other"), ("gemini", "fb")], ran
    [fb] = cli.records("fb")
    assert (fb["outcome"], fb["agent"], fb["fallback_from"]) == ("ok", "gemini", "claude")
    assert "--resume" not in fb["argv"]
    assert cli.state()["loops"]["fb"]["session_id"] is None  # gemini's is not claude's
    assert not cli.records("b") and not cli.records("c")
    assert len((cli.state_dir / "events.jsonl").read_text().splitlines()) == 1

    # Logged in again: resuming one loop lets it find out; its success
    # releases the loops the account held.
    fixed.touch()
    cli("resume", "a", env=env, check=0)
    assert cli("run", "a", env=env).returncode == 0
    st = cli.state()["loops"]
    assert [st[n]["status"] for n in ("a", "b", "c")] == ["active"] * 3
    assert not cli.state()["accounts"]
    doctor = json.loads(cli("doctor", "--json", env=env).stdout)
    assert not [f for f in doctor["findings"] if f["check"] == "accounts"]


def test_exports_carry_the_fallback_and_its_key_name() -> None:
    from loopctl.integrations.export import secret_names, traveling_definition
    from loopctl.storage.yamlio import parse_yaml_text

    loop = parse_loop("x", {"prompt": "p", "every": "1h", "agent": "claude",
                            "fallback_agent": "codex"})
    raw = parse_yaml_text(traveling_definition(loop, None), "x")["loops"]["x"]
    assert raw["fallback_agent"] == "codex"
    assert parse_loop("x", raw).fallback_agent == "codex"
    assert secret_names(loop) == ["ANTHROPIC_API_KEY", "OPENAI_API_KEY"]


def test_update_sets_and_clears_the_fallback(cli: CLI, tmp_path: Path) -> None:
    cli("start", "work", "--name", "u", "--every", "1h", "--agent", "claude", check=0)
    bad = cli("update", "u", "--fallback-agent", "nope")
    assert bad.returncode == 2 and "expected one of" in bad.stderr
    assert bad.stderr.count("\n") == 1, bad.stderr
    cli("update", "u", "--fallback-agent", "gemini", check=0)
    assert cli.json("show", "u")["definition"]["fallback_agent"] == "gemini"
    assert cli.json("status", "u")["fallback_agent"] == "gemini"
    cli("update", "u", "--fallback-agent", "none", check=0)
    assert "fallback_agent" not in cli.json("show", "u")["definition"]
    same = cli("update", "u", "--fallback-agent", "claude")
    assert same.returncode == 2 and "own agent" in same.stderr, same.stderr


def test_a_usage_limit_defers_the_whole_account_with_one_event(cli: CLI, tmp_path: Path) -> None:
    env, log, _ = fake_agents(tmp_path, "claude-2.1.328-result-rate-limited-429.json")
    common = ("--every", "1h", "--agent", "claude", "--sandbox", "off", "--cwd", str(tmp_path))
    for name in ("a", "b"):
        cli("start", "work", "--name", name, *common, env=env, check=0)
    proc = cli("run", "a", env=env)
    assert proc.returncode == 75, (proc.stdout, proc.stderr)  # deferred
    st = cli.state()["loops"]
    assert [(st[n]["status"], st[n]["reason"]) for n in ("a", "b")] == \
        [("paused", "rate_limited")] * 2
    assert st["a"]["resume_at"] == st["b"]["resume_at"] is not None
    [event] = [json.loads(x) for x in (cli.state_dir / "events.jsonl").read_text().splitlines()]
    assert event["reason"] == "rate_limited" and event["account"]["loops"] == ["a", "b"]
    assert event["account"]["until"] and "a, b" in event["summary"]
    # A loop of the account made now waits for the same reset, silently.
    cli("start", "work", "--name", "c", *common, env=env, check=0)
    assert cli("tick", "--wait", env=env).returncode == 0
    c = cli.state()["loops"]["c"]
    assert (c["status"], c["reason"], c["resume_at"]) == \
        ("paused", "rate_limited", st["a"]["resume_at"])
    assert [x["loop"] for x in launches(log)] == ["a"]
    assert len((cli.state_dir / "events.jsonl").read_text().splitlines()) == 1
    assert "rate_limited" in cli("status", "c", env=env, check=0).stdout
    # By hand, a loop not yet due is held too (75: deferred), unless forced.
    cli("start", "work", "--name", "d", *common, "--after", "1h", env=env, check=0)
    proc = cli("run", "d", env=env)
    assert proc.returncode == 75 and "rate-limited" in proc.stderr, (proc.stdout, proc.stderr)
    assert [x["loop"] for x in launches(log)] == ["a"]
    assert cli("run", "d", "--force", env=env).returncode == 75  # ran: the agent said 429
    assert [x["loop"] for x in launches(log)] == ["a", "d"]
