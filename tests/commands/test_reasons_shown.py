"""Issue 38 item 5: the reason a run failed reaches every place a person
looks: the attention event, the notification (sent as an Apprise failure),
the digest, `history`, and one-loop `status` with the fix."""

from __future__ import annotations

import json

from integrations.test_notify import Receiver, delivered, receiver  # noqa: F401 - the fixture

from conftest import CLI, agent_command

ERROR = "could not connect to database"


def failing(cli: CLI, name: str = "db", *extra: str) -> None:
    cli("start", "p", "--name", name, "--every", "1h", "--max-failures", "1", *extra,
        "--command", agent_command("--print", ERROR, "--exit", "1"), check=0)
    cli("run", name, check=1)


def events(cli: CLI) -> list[dict[str, object]]:
    path = cli.state_dir / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_failure_limit_event_carries_the_error_and_counts_in_english(cli: CLI) -> None:
    failing(cli)
    [event] = events(cli)
    assert event["reason"] == "failure_limit"
    assert event["evidence"] == {"source": "loopctl", "text": f"1 failure in a row: {ERROR}"}


def test_a_failure_is_notified_as_an_apprise_failure_with_the_error(
        cli: CLI, receiver: Receiver) -> None:  # noqa: F811 - the fixture
    failing(cli, "db", "--notify", receiver.url())
    delivered(cli, "db", 1)
    [post] = receiver.posts
    assert post.body["type"] == "failure"
    assert f"1 failure in a row: {ERROR}" in post.message


def test_a_completion_is_an_apprise_success(cli: CLI, receiver: Receiver) -> None:  # noqa: F811
    cli("start", "p", "--name", "done", "--every", "1h", "--notify", receiver.url(),
        "--command", agent_command("--decide", "complete"), check=0)
    cli("run", "done", check=0)
    delivered(cli, "done", 1)
    assert [p.body["type"] for p in receiver.posts] == ["success"]


def test_the_digest_says_why_a_paused_loop_needs_you(cli: CLI) -> None:
    failing(cli)
    [needs] = cli.json("digest")["needs_you"]
    assert needs["loop"] == "db" and ERROR in needs["why"]
    assert f"db: paused (failure_limit): {ERROR}" in cli("digest", check=0).stdout


def test_status_of_a_loop_paused_at_its_failure_limit_gives_the_fix_and_the_whole_reason(
        cli: CLI) -> None:
    long_error = ERROR + " at " + "db.internal.example.com:5432 " * 4
    cli("start", "p", "--name", "db", "--every", "1h", "--max-failures", "1",
        "--command", agent_command("--print", long_error, "--exit", "1"), check=0)
    cli("run", "db", check=1)
    text = cli("status", "db", env={"COLUMNS": "80"}, check=0).stdout
    assert "  fix        1 failure in a row; fix the cause, then `loopctl resume db`" in text
    assert f"  reason     {long_error.strip()}" in text
    # the fix is for people: `status --json` stays the LOOP object `ls --json` has
    assert "fix" not in cli.json("status", "db")


def test_history_gives_each_failed_run_its_reason_and_keeps_started(cli: CLI) -> None:
    failing(cli)
    run = cli.records("db")[-1]
    text = cli("history", "db", env={"COLUMNS": "64"}, check=0).stdout.splitlines()
    started = run["started_at"].replace("T", " ").rstrip("Z")
    assert text[1].startswith(f"{run['run_id']}  {started}"), text
    assert text[2] == f"    {ERROR}"
