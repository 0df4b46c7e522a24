"""GitHub webhooks against a real server (DESIGN §19): a signed delivery
triggers the matching loops with the compact payload; a forged, missing
or unkeyed signature, invalid JSON and a replayed delivery fire nothing;
what a person writes is gated on write access, never a bot."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest

from conftest import CLI, agent_command
from serve.support import SECRET, serving


def comment(body: str, association: str = "MEMBER", login: str = "octocat",
            kind: str = "User", repo: str = "octo/service") -> dict[str, Any]:
    return {"action": "created", "repository": {"full_name": repo},
            "sender": {"login": login, "type": kind},
            "issue": {"number": 42, "title": "Flaky <test>",
                      "html_url": "https://github.com/octo/service/issues/42"},
            "comment": {"body": body, "author_association": association,
                        "html_url": "https://github.com/octo/service/issues/42#c1"}}


def fixer(cli: CLI, *extra: str) -> None:
    cli("start", "fix it", "--name", "fixer", "--on-demand", "--command", agent_command(),
        "--on-github", "issue_comment.created", "--github-command", "/fix",
        "--github-repo", "octo/service", *extra, check=0)


def triggered(cli: CLI, name: str = "fixer") -> int:
    return int((cli.state()["loops"][name].get("triggered") or {}).get("count", 0))


def test_a_signed_comment_triggers_with_the_compact_payload(cli: CLI, tmp_path: Path) -> None:
    fixer(cli)
    cli("start", "p", "--name", "bystander", "--on-demand", "--command", agent_command(),
        check=0)
    long_body = "/fix the flaky test\n" + "é" * 9000
    with serving(tmp_path) as served:
        status, said = served.github("issue_comment", comment(long_body))
    assert status == 202, said
    assert said["triggered"] == ["fixer"] and said["result"] == "triggered"
    assert triggered(cli) == 1 and triggered(cli, "bystander") == 0
    payload = json.loads((cli.state_dir / "runs" / "fixer" / "trigger.pending").read_text())
    assert payload["event"] == "issue_comment" and payload["action"] == "created"
    assert (payload["repository"], payload["sender"], payload["number"]) == \
        ("octo/service", "octocat", 42)
    assert payload["title"] == "Flaky <test>" and payload["delivery"] == "d-1"
    assert payload["url"].endswith("#c1") and "not instructions" in payload["note"]
    assert payload["body"].startswith("/fix the flaky test")
    assert len(payload["body"].encode()) <= 8192 < len(long_body.encode()), "cut at 8 KiB"


def test_the_summary_reaches_the_agent_as_its_trigger_file(cli: CLI, tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    cli("start", "fix it", "--name", "fixer", "--on-demand", "--command",
        agent_command("--record", str(calls)), "--on-github", "issue_comment.created",
        check=0)
    with serving(tmp_path) as served:
        assert served.github("issue_comment", comment("/fix <now>"))[0] == 202
    cli("tick", "--wait", check=0)
    [call] = [json.loads(row) for row in calls.read_text().splitlines()]
    given = json.loads(Path(call["env"]["LOOPCTL_TRIGGER_FILE"]).read_text())
    assert (given["event"], given["body"], given["number"]) == \
        ("issue_comment", "/fix <now>", 42)
    assert "/fix <now>" not in " ".join(call["argv"]), "data, never an argument"
    assert cli.records("fixer")[0]["trigger"] == "api"


def test_forged_missing_or_unkeyed_signatures_fire_nothing(cli: CLI, tmp_path: Path) -> None:
    fixer(cli)
    body = json.dumps(comment("/fix")).encode()
    with serving(tmp_path) as served:
        assert served.github("issue_comment", None, raw=body, secret=b"wrong")[0] == 401
        for signature in ("", "sha256=", "sha1=abc", "sha256=" + "0" * 64):
            status, said = served.json("POST", "/hooks/github", body, token=None, headers={
                "X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": "d-2",
                "X-Hub-Signature-256": signature})
            assert status == 401 and said["result"] == "bad_signature", signature
        # Signed for another body: the signature covers the raw bytes.
        signed = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
        status, _ = served.json("POST", "/hooks/github", body + b" ", token=None, headers={
            "X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": "d-3",
            "X-Hub-Signature-256": signed})
        assert status == 401
        status, _ = served.github("issue_comment", None, raw=body + b" ")
        assert status == 202, "the control: a body signed as sent is accepted"
    assert triggered(cli) == 1
    with serving(tmp_path, secret=False) as served:
        status, said = served.github("issue_comment", comment("/fix"), delivery="d-9")
        assert status == 401 and "no webhook secret" in said["error"]
    assert triggered(cli) == 1


def test_a_replayed_delivery_fires_nothing_even_after_a_restart(cli: CLI,
                                                                tmp_path: Path) -> None:
    """By id, and by body: the signature does not cover the id, so one
    captured signed body re-sent under fresh ids must fire nothing."""
    fixer(cli)
    with serving(tmp_path) as served:
        assert served.github("issue_comment", comment("/fix"), delivery="abc-1")[0] == 202
        status, said = served.github("issue_comment", comment("/fix"), delivery="abc-1")
        assert status == 200 and said["result"] == "duplicate"
        for at in range(3):  # the same signed body, a fresh id each time
            status, said = served.github("issue_comment", comment("/fix"), delivery=f"new-{at}")
            assert status == 200 and said["result"] == "duplicate", said
    with serving(tmp_path) as served:
        for delivery in ("abc-1", "after-restart"):
            assert served.github("issue_comment", comment("/fix"), delivery=delivery)[1][
                "result"] == "duplicate", delivery
        assert served.github("issue_comment", comment("/fix again"),
                             delivery="abc-2")[0] == 202, "the control: a new body fires"
    assert triggered(cli) == 2


def test_projects_v2_item_and_digits_in_event_names_are_accepted(cli: CLI,
                                                                 tmp_path: Path) -> None:
    cli("start", "p", "--name", "board", "--on-demand", "--command", agent_command(),
        "--on-github", "projects_v2_item.created", check=0)
    item = {"action": "created", "projects_v2_item": {"id": 1},
            "sender": {"login": "octocat", "type": "User"}}
    with serving(tmp_path) as served:
        status, said = served.github("projects_v2_item", item)
        assert status == 202 and said["triggered"] == ["board"], said
        status, said = served.github("projects_v2", dict(item, x=1), delivery="d-2")
        assert status == 200 and said["result"] == "ignored", said
    assert triggered(cli, "board") == 1


def test_invalid_json_and_missing_headers_are_bad_requests(cli: CLI, tmp_path: Path) -> None:
    fixer(cli)
    with serving(tmp_path) as served:
        for raw in (b"{not json", b"[1, 2]", b"\xff"):
            status, said = served.github("issue_comment", None, raw=raw)
            assert status == 400 and said["result"] == "bad_request", raw
        status, _ = served.github("Issue Comment!", comment("/fix"))
        assert status == 400
    assert triggered(cli) == 0


GATED = [
    (comment("/fix", association="NONE"), "no write access"),
    (comment("/fix", association="CONTRIBUTOR"), "no write access"),
    (comment("/fix", login="renovate[bot]", kind="Bot"), "bot"),
    (comment("please /fix"), "does not start with /fix"),
    (comment("/fixed"), "does not start with /fix"),
    (comment("/fix", repo="octo/other"), "is not octo/service"),
]


def test_what_a_person_writes_is_gated(cli: CLI, tmp_path: Path) -> None:
    fixer(cli)
    with serving(tmp_path) as served:
        for at, (payload, why) in enumerate(GATED):
            status, said = served.github("issue_comment", payload, delivery=f"g-{at}")
            assert status == 200 and said["result"] == "ignored", said
            assert why in said["ignored_loops"]["fixer"], (why, said)
        assert triggered(cli) == 0
        assert served.github("issue_comment", comment("/fix now"))[0] == 202, "the control"


@pytest.mark.slow
def test_anyone_opens_comments_but_not_bots_and_checks_come_as_they_are(
        cli: CLI, tmp_path: Path) -> None:
    fixer(cli, "--github-anyone")
    cli("start", "p", "--name", "ci", "--on-demand", "--command", agent_command(),
        "--on-github", "check_suite.completed", check=0)
    suite = {"action": "completed", "repository": {"full_name": "octo/service"},
             "sender": {"login": "github-actions[bot]", "type": "Bot"},
             "check_suite": {"conclusion": "failure", "head_branch": "main",
                             "pull_requests": [{"number": 7}]}}
    with serving(tmp_path) as served:
        assert served.github("issue_comment", comment("/fix", association="NONE"))[0] == 202
        status, said = served.github("issue_comment", comment("/fix", kind="Bot"), "d-2")
        assert status == 200 and "bot" in said["ignored_loops"]["fixer"]
        status, said = served.github("check_suite", suite, "d-3")
        assert status == 202 and said["triggered"] == ["ci"]
        status, said = served.github("check_suite", dict(suite, action="requested"), "d-4")
        assert status == 200 and said["result"] == "ignored"
    payload = json.loads((cli.state_dir / "runs" / "ci" / "trigger.pending").read_text())
    assert (payload["conclusion"], payload["head_branch"], payload["number"]) == \
        ("failure", "main", 7)
    assert (triggered(cli), triggered(cli, "ci")) == (1, 1)


def test_a_paused_loop_is_not_triggered_and_the_answer_says_why(cli: CLI,
                                                                tmp_path: Path) -> None:
    fixer(cli)
    cli("pause", "fixer", check=0)
    with serving(tmp_path) as served:
        status, said = served.github("issue_comment", comment("/fix"))
    assert status == 200 and "paused" in said["ignored_loops"]["fixer"]
    assert triggered(cli) == 0
