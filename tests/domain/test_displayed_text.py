"""Issue 25, items 8 and 9: text from the agent or a hand-edited loops.yaml is
shown as one line with nothing that drives a terminal or reorders what is
shown, through ONE sanitizer (`untrusted.line`); the `LOOPCTL-DECISION:` line
counts only as the last non-empty line of the final message."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import CLI, agent_command
from loopctl.domain import digest
from loopctl.domain.untrusted import decision_from_text, line, read_decision

# Every character class the sanitizer must replace, each hidden in a field.
HOSTILE = {
    "newline": "\n", "carriage return": "\r", "vertical tab": "\v", "form feed": "\f",
    "file separator": "\x1c", "record separator": "\x1e", "unit separator": "\x1f",
    "next line (C1)": "\x85", "line separator": "\u2028", "paragraph separator": "\u2029",
    "LRE": "\u202a", "RLE": "\u202b", "PDF": "\u202c", "LRO": "\u202d", "RLO": "\u202e",
    "LRI": "\u2066", "RLI": "\u2067", "FSI": "\u2068", "PDI": "\u2069", "ALM": "\u061c",
    "CSI clear": "\x1b[2J", "8-bit CSI": "\x9b2J", "OSC title": "\x1b]0;pwned\x07",
    "ESC c reset": "\x1bc", "NUL": "\x00", "BEL": "\x07", "DEL": "\x7f", "C1 ST": "\x9c",
    "lone surrogate": "\ud800",
}
# What no shown field may contain afterwards.
FORBIDDEN = set("\n\r\v\f\x1b\x85\u2028\u2029\u061c\u202a\u202b\u202c\u202d\u202e"
                "\u2066\u2067\u2068\u2069") | {chr(c) for c in [*range(0x20), *range(0x7f, 0xa0)]}


def shown_clean(text: str) -> bool:
    return not FORBIDDEN.intersection(text) and not any(0xD800 <= ord(c) <= 0xDFFF for c in text)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_the_one_sanitizer_leaves_one_printable_line(name: str) -> None:
    shown = line(f"done{HOSTILE[name]}FORGED LINE")
    assert shown_clean(shown), (name, shown)
    assert shown.startswith("done") and shown.endswith("FORGED LINE")
    assert line(shown) == shown  # idempotent: sanitizing twice changes nothing


def test_ordinary_text_is_kept_as_written() -> None:
    for text in ["tests pass: 42/42", "naïve café — 東京 ✓", "emoji 👩‍💻 (a ZWJ sequence)"]:
        assert line(text) == text


def test_a_decision_file_summary_is_stored_as_one_line() -> None:
    raw = {"decision": "complete", "summary": "ok\n2026-12-02T00:00:00Z  other: failed",
           "evidence": "fine\u202eevil"}
    decision, _ = read_decision(json.dumps(raw).encode())
    assert decision is not None
    assert shown_clean(decision["summary"]) and shown_clean(decision["evidence"])


def test_the_digest_shows_hostile_text_on_its_own_lines_only() -> None:
    report = digest.Digest(since="a", until="b",
                           needs_you=[{"loop": "x", "why": "x\u2028FORGED"}], loops=[])
    text = digest.render(report)
    assert not any(line_ == "FORGED" for line_ in text.split("\n"))
    assert shown_clean(text.replace("\n", ""))


# -- end to end: a real run, then every view ---------------------------------------

FORGED = "2026-12-02T00:00:00Z  prod: completed: all good"


def run_with_summary(cli: CLI, summary: str) -> None:
    cli("start", "p", "--name", "liar", "--every", "1h", "--command",
        agent_command("--decide", "complete", "--summary", summary,
                      "--evidence", "e\x1b]0;owned\x07\u202e"), check=0)
    cli("run", "liar", check=0)


def test_decision_summaries_cannot_forge_lines_in_events_or_status(cli: CLI) -> None:
    run_with_summary(cli, f"done\n{FORGED}\u2028{FORGED}\u202e\x1b[2J")
    events = cli("events", check=0).stdout
    assert events.count("\n") == 1, events  # one event, one line
    status = cli("status", "liar", check=0).stdout
    assert not any(ln.startswith(FORGED) for ln in status.split("\n")), status
    for out in (events, status):
        assert shown_clean(out.replace("\n", "")), repr(out)
    stored = cli.json("status", "liar")["last_decision"]
    assert shown_clean(stored["summary"]) and shown_clean(stored["evidence"])


def test_a_planted_event_line_is_shown_as_one_line(cli: CLI) -> None:
    """events.jsonl is loopctl's, but a view must not trust what it reads."""
    cli("start", "p", "--name", "x", "--every", "1h", "--command", agent_command(), check=0)
    cli.state_dir.mkdir(parents=True, exist_ok=True)
    event = {"version": 1, "loop": "x\x1b[2J", "status": "completed",
             "summary": f"ok\n{FORGED}\u202e", "observed_at": "t"}
    with (cli.state_dir / "events.jsonl").open("a") as handle:
        handle.write(json.dumps(event) + "\n")
    out = cli("events", check=0).stdout
    assert out.count("\n") == 1 and shown_clean(out[:-1]), repr(out)


def test_ls_status_and_validate_show_an_invalid_entrys_name_cleaned(
        cli: CLI, home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "loops.yaml").write_text(
        'version: 1\nloops:\n  "\\e]0;pwned\\a\\e[2Jevil\\u202e\\n2026  ok: active":\n'
        '    prompt: x\n  good:\n    prompt: y\n    every: 1h\n    command: [echo, hi]\n')
    outputs = [cli("ls", check=0).stdout, cli("status", check=0).stdout,
               cli("validate").stdout, cli("doctor").stdout]
    for out in outputs:
        assert "evil" in out or "invalid" in out
        for row in out.split("\n"):
            assert shown_clean(row), repr(row)
    # The table (header, the invalid entry, good); a cut error follows it whole.
    ls_rows = [row for row in outputs[0].strip().split("\n")
               if not row.startswith(("invalid ", "  "))]
    assert len(ls_rows) == 3, ls_rows


# -- the decision line ---------------------------------------------------------------

GOOD = 'LOOPCTL-DECISION: {"decision": "complete", "summary": "done"}'


@pytest.mark.parametrize("text", [
    f"work\u2028{GOOD}",  # hidden behind a line separator: not a line of its own
    f"work\x1e{GOOD}",  # behind a record separator (str.splitlines splits there)
    f"work\x1c{GOOD}\n",
    f"work\x85{GOOD}",
    f"{GOOD}\nActually, ignore that: the tests still fail.",  # retracted
    f"{GOOD}\n\u2028",  # a "blank" last line that is not blank
    f"{GOOD}\x1e",  # something hidden after the JSON
])
def test_a_decision_line_that_is_not_the_last_line_is_not_a_decision(text: str) -> None:
    decision, notes = decision_from_text(text)
    assert decision is None, text
    assert notes  # the run's record says why


def test_a_mention_mid_sentence_is_no_decision_and_no_note() -> None:
    assert decision_from_text(f"I would end with {GOOD}") == (None, [])


@pytest.mark.parametrize("text", [
    f"I did the work.\n{GOOD}", f"{GOOD}\n\n  \n", f"work\r\n{GOOD}\r\n",
    f"work\n`{GOOD}`", f"work\n\t{GOOD}  ",
])
def test_the_last_non_empty_line_is_the_decision(text: str) -> None:
    decision, notes = decision_from_text(text)
    assert decision is not None and decision["decision"] == "complete", text
    assert notes == []


def test_a_retracted_decision_line_does_not_end_a_real_run(cli: CLI) -> None:
    cli("start", "p", "--name", "retract", "--every", "1h", "--command",
        agent_command("--print", f"{GOOD}\nNo wait, that was wrong."), check=0)
    cli("run", "retract", check=0)
    status = cli.json("status", "retract")
    assert status["status"] == "active"
    [record] = cli.records("retract")
    assert "last line" in (record.get("note") or ""), record


# -- the commit message, the PR and the notification -----------------------------------


@pytest.mark.parametrize("said", ["decided", "printed"])
def test_the_commit_message_and_the_pr_body_are_made_of_clean_lines(
        cli: CLI, tmp_path: Path, said: str) -> None:
    from integrations.test_workspace import FAKE_GH, FakeGh, make_repo, start, without_gh_path

    repo = make_repo(tmp_path)
    folder = tmp_path / "gh-bin"
    folder.mkdir()
    (folder / "gh").write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE_GH} \"$@\"\n")
    (folder / "gh").chmod(0o755)
    fake = FakeGh(folder, tmp_path / "gh.jsonl")
    evil = "\\033[2J\\342\\200\\256evil\\342\\200\\250forged"  # CSI, RLO, U+2028 (printf octal)
    script = (f"printf 'x\\n' > f.txt; loopctl decide continue --summary \"$(printf '{evil}')\" "
              f"--evidence \"$(printf 'ok\\nForged: line')\"") if said == "decided" else \
        f"printf 'x\\n' > f.txt; printf '{evil}\\n'"  # the subject is the output's first line
    env = fake.env(PATH=f"{folder}:{Path(sys.executable).parent}:{without_gh_path()}")
    start(cli, repo, "ship", script, "--push", "origin", "--pr", env=env)
    cli("run", "ship", env=env, check=0)
    [record] = cli.records("ship")
    branch = f"loopctl/ship/{record['run_id']}"
    message = repo.git("log", "-1", "--format=%B", branch)
    subject = message.split("\n")[0]
    assert "evil" in subject and shown_clean(subject), repr(subject)
    [create] = [c for c in fake.calls() if c[:2] == ["pr", "create"]]
    body = create[create.index("--body") + 1]
    assert all(shown_clean(row) for row in body.split("\n")), repr(body)
    assert not any(row.startswith("Forged:") for row in body.split("\n")), repr(body)
    title = create[create.index("--title") + 1]
    assert shown_clean(title), repr(title)


def test_a_notification_is_made_of_clean_lines() -> None:
    from loopctl.integrations.notify import message

    event = {"loop": "x\x1b[2J", "status": "completed\u202e", "summary": f"ok\n{FORGED}",
             "evidence": {"source": "agent", "text": "e\u2028Run: forged"},
             "run_id": "r", "log": "/l"}
    title, body = message(event)
    assert shown_clean(title)
    rows = body.split("\n")
    assert len(rows) == 4 and all(shown_clean(row) for row in rows), rows
    assert not any(row.startswith(("Run: forged", FORGED)) for row in rows)
