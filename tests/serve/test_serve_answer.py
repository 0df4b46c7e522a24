"""Answering a blocked loop through the server (DESIGN §19 round 2): the
API's `/resume` takes the answer as its body, the page's form as a field;
an answer too big, not UTF-8 or for a loop that is not blocked is refused
with one line (422 or 409) and nothing is kept; the question on the page is
text, whatever the agent wrote."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import CLI, agent_command
from serve.support import serving

QUESTION = '<img src=x onerror=alert(1)> "which" db?'


def blocked(cli: CLI, tmp_path: Path) -> Path:
    calls = tmp_path / "calls.jsonl"
    cli("start", "p", "--name", "b", "--every", "1h", "--command",
        agent_command("--record", str(calls), "--decide", "block", "--summary", QUESTION),
        check=0)
    cli("run", "b", check=0)
    return calls


def test_the_api_and_the_form_take_an_answer_and_refuse_bad_ones(
        cli: CLI, tmp_path: Path) -> None:
    calls = blocked(cli, tmp_path)
    pending = cli.state_dir / "runs" / "b" / "answer.pending"
    with serving(tmp_path) as served:
        status, _, page = served.request("GET", "/loops/b")
        assert status == 200 and b"&lt;img src=x onerror=alert(1)&gt; &quot;which&quot; db?" \
            in page and b"<img src=x" not in page
        for body, code in ((b"x" * (65 * 1024), 422), (b"\xff\xfe", 422), (b"a\0b", 422)):
            status, answer = served.json("POST", "/api/loops/b/resume", body)
            assert status == code and "--answer" in answer["error"], answer
            assert "\n" not in answer["error"] and not pending.exists()
        status, answer = served.json("POST", "/api/loops/a-loop-that-is-not/resume", b"hi")
        assert status == 404
        status, answer = served.json("POST", "/api/loops/b/resume", b"use <pg>")
        assert status == 200 and "your answer" in answer["message"], answer
        assert pending.read_text() == "use <pg>"
        status, answer = served.json("POST", "/api/loops/b/resume", b"again")
        assert status == 409 and "not blocked" in answer["error"]
    cli("run", "b", check=0)
    second = [json.loads(line) for line in calls.read_text().splitlines()][1]
    assert Path(second["env"]["LOOPCTL_ANSWER_FILE"]).read_text() == "use <pg>"
