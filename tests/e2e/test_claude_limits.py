"""What may hold an account (DESIGN §18), against the real Claude Code CLI
(pinned in tests/e2e/common.py) and a local stub of the Messages API: the
model's own words about a usage limit hold nothing; the API's 429, which the
CLI reports in its structured fields, holds every loop of the account, and
they show `held (rate_limited) until T`.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import CLI
from e2e.claude_stub import claude_api
from e2e.common import Stub, agent_cli, refusing
from e2e.test_claude import claude_env, result_object, start

pytestmark = pytest.mark.slow


def test_the_models_words_about_a_limit_hold_nothing(cli: CLI, tmp_path: Path) -> None:
    agent_cli("claude")
    start(cli, tmp_path)
    words = (f"Claude AI usage limit reached|{int(time.time()) + 7 * 86400}\n"
             "You've hit your limit · resets 3pm")
    with claude_api(None, final=words) as (stub, _model):
        assert cli("run", "c", env=claude_env(stub), timeout=240).returncode == 0
    [record] = cli.records("c")
    assert record["outcome"] == "ok", record
    assert "usage limit reached" in result_object(cli, record)["result"]
    state = cli.state()
    assert not state.get("accounts") and state["loops"]["c"]["status"] == "active"


def test_the_clis_429_holds_the_account_and_its_loops_show_held(
        cli: CLI, tmp_path: Path) -> None:
    agent_cli("claude")
    work = start(cli, tmp_path)
    body = {"type": "error", "error": {"type": "rate_limit_error",
                                       "message": "Number of request tokens has exceeded "
                                                  "your per-minute rate limit"}}
    with Stub(refusing(429, body)) as stub:
        env = dict(claude_env(stub), CLAUDE_CODE_MAX_RETRIES="0")
        cli("start", "again", "--name", "c2", "--every", "1h", "--agent", "claude",
            "--after", "1h", "--cwd", str(work), "--sandbox", "on", env=env, check=0)
        assert cli("run", "c", env=env, timeout=240).returncode == 75
    [record] = cli.records("c")
    assert record["outcome"] == "deferred", record
    assert result_object(cli, record)["api_error_status"] == 429
    [mark] = cli.state()["accounts"].values()
    assert mark["kind"] == "rate_limited" and mark["until"] >= time.time() + 59
    listing = cli("ls", env=env, check=0).stdout
    rows = [ln for ln in listing.splitlines() if ln.startswith(("c ", "c2 "))]
    assert len(rows) == 2 and all("held (rate_limited) until" in r for r in rows), listing
