"""A failed check is a failed run, everywhere (DESIGN §16, issue 51 item 1):
real `loopctl` processes, a real agent (`true`) and a real check that
fails. Under `--until-check` a red check is "not yet", and `--no-progress`
counts red checks with the same output; the pause says why (item 11)."""

from __future__ import annotations

from pathlib import Path

from conftest import CLI

RED = "sh -c 'echo 3 tests failing; exit 2'"


def test_a_failed_check_is_a_failed_run_in_every_view(cli: CLI, tmp_path: Path) -> None:
    from loopctl.domain.run_record import RunRecord
    from loopctl.engine.daemon_log import run_end_line

    cli("start", "work", "--name", "x", "--every", "1h", "--cwd", str(tmp_path),
        "--command", "true", "--check", RED, "--max-failures", "2", check=0)
    cli("run", "x", check=1)
    [record] = cli.records("x")
    assert record["outcome"] == "failed" and record["exit_code"] == 0  # the agent's own
    assert record["check"]["exit_code"] == 2
    assert record["note"].startswith("check failed (exit 2)")
    status = cli.json("status", "x")
    assert status["last_run"]["reason"] == "check failed (exit 2)"
    assert status["failures"]["consecutive"] == 1  # counts toward --max-failures
    st = cli.state()["loops"]["x"]
    assert st["next_due"] - st["last_end"] >= 2 * 3600 - 1  # and the backoff
    assert "failed: check failed (exit 2)" in cli("ls").stdout
    shown = cli("status", "x").stdout
    assert "1 in a row" in shown and "check failed (exit 2)" in shown, shown
    history = cli("history", "x").stdout
    assert "failed" in history and "check failed (exit 2)" in history, history
    assert "failed" in cli("watch").stdout  # not a tty: one snapshot
    line = run_end_line("x", RunRecord.from_json(record, record["run_id"]))
    assert " ended: failed (exit 0, " in line and line.endswith(": check failed (exit 2)")
    digest = cli("digest", "--since", "1h").stdout
    assert "Needs you\n  x: failing: check failed (exit 2)" in digest, digest
    cli("run", "x", check=1)
    status = cli.json("status", "x")
    assert (status["status"], status["reason"]) == ("paused", "failure_limit")


def test_until_check_a_red_check_is_not_yet_and_no_progress_says_why(
        cli: CLI, tmp_path: Path) -> None:
    cli("start", "work", "--name", "u", "--every", "1h", "--cwd", str(tmp_path),
        "--command", "true", "--check", RED, "--until-check", "--no-progress", "2", check=0)
    cli("run", "u", check=1)  # a CI job is never green on red tests
    [record] = cli.records("u")
    assert record["outcome"] == "ok" and record["note"] == "not yet: check failed (exit 2)"
    status = cli.json("status", "u")
    assert status["failures"]["consecutive"] == 0 and status["status"] == "active"
    assert status["last_run"]["reason"] == "not yet: check failed (exit 2)"
    assert "ok: not yet: check failed (exit 2)" in cli("ls").stdout
    cli("run", "u", check=1)  # the same red output again: no progress
    status = cli.json("status", "u")
    why = "no_progress: 2 red checks in a row with the same output"
    assert (status["status"], status["reason"], status["note"]) == ("paused", "no_progress", why)
    assert why in cli("status", "u").stdout
    assert "2 red checks in a row with the same output" in cli("doctor").stdout
    digest = cli("digest", "--since", "1h").stdout
    assert "u: paused (no_progress): 2 red checks in a row with the same output" in digest
    cli("resume", "u", check=0)
    assert cli.json("status", "u")["note"] is None  # said while paused, gone after


def test_the_overview_row_says_why_no_progress_paused() -> None:
    from loopctl.serve.pages import status_cell

    cell = status_cell({"status": "paused", "reason": "no_progress",
                        "note": "no_progress: 3 identical results in a row"})
    assert "(no_progress: 3 identical results in a row)" in cell
    assert "(user)" in status_cell({"status": "paused", "reason": "user", "note": "x"})
