"""A trigger's payload and a person's answer are the team's (DESIGN §21):
given on m2, kept in the store, taken once by the fire that claims them on
m1 (m2 may not run the loop: `machines: [m1]`), whose agent reads them as
files as it would if they had been given on m1."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import psycopg
import pytest

from store.machines import Machine, machines

pytestmark = pytest.mark.real_processes

# Never due by its schedule: only a trigger or `run` fires it. The agent
# writes what it was given; without an answer it blocks on a question.
LOOP = """\
version: 1
store: {dsn}
loops:
  asks:
    prompt: |
      echo "payload=$(cat "$LOOPCTL_TRIGGER_FILE" 2>/dev/null)" >> {out}
      echo "answer=$(cat "$LOOPCTL_ANSWER_FILE" 2>/dev/null)" >> {out}
      [ -n "$LOOPCTL_ANSWER_FILE" ] || [ -z "{block}" ] ||
        {python} -m loopctl decide block --summary "which database?"
    agent: shell
    cron: 0 0 1 1 *
    cwd: {cwd}
    timeout: 1m
    machines: [m1]
"""


def team(tmp_path: Path, pg_dsn: str, block: bool) -> tuple[Machine, Machine, Path]:
    out = tmp_path / "seen"
    m1, m2 = machines(tmp_path / "machines", 2)
    for m in (m1, m2):
        m.define(LOOP.format(dsn=pg_dsn, out=out, cwd=tmp_path, python=sys.executable,
                             block="yes" if block else ""))
    assert m1.run("store", "init").returncode == 0
    return m1, m2, out


def seen(out: Path) -> list[str]:
    return out.read_text().splitlines() if out.exists() else []


def pending(dsn: str) -> list[tuple[str, str]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT loop, kind FROM loopctl.pending_texts").fetchall()


def tick(machine: Machine) -> dict:
    done = machine.run("tick", "--wait", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_payload_given_on_one_machine_reaches_the_run_on_another_once(
        tmp_path: Path, pg_dsn: str) -> None:
    m1, m2, out = team(tmp_path, pg_dsn, block=False)
    payload = tmp_path / "payload.txt"
    payload.write_text("deploy v2 from m2")
    given = m2.run("trigger", "asks", "--payload", str(payload))
    assert given.returncode == 0, given.stderr
    assert pending(pg_dsn) == [("asks", "trigger")]
    assert not list((m2.home / "loopctl").rglob("trigger.pending"))
    assert tick(m2)["fired"] == []  # not m2's to run: the payload waits in the store
    assert len(tick(m1)["fired"]) == 1
    assert seen(out) == ["payload=deploy v2 from m2", "answer="]
    assert pending(pg_dsn) == []
    assert m2.run("trigger", "asks").returncode == 0  # no payload this time
    assert len(tick(m1)["fired"]) == 1
    assert seen(out)[2:] == ["payload=", "answer="]  # taken once


def test_an_answer_given_on_one_machine_reaches_the_next_run_on_another(
        tmp_path: Path, pg_dsn: str) -> None:
    m1, m2, out = team(tmp_path, pg_dsn, block=True)
    assert m1.run("run", "asks").returncode == 0
    status = json.loads(m2.run("status", "asks", "--json").stdout)
    assert status["reason"] == "blocked", status
    answered = m2.run("resume", "asks", "--answer", "use <postgres>\nnot sqlite")
    assert answered.returncode == 0, answered.stderr
    assert "its next run gets your answer" in answered.stdout
    assert pending(pg_dsn) == [("asks", "answer")]
    assert m1.run("run", "asks").returncode == 0
    assert seen(out) == ["payload=", "answer=", "payload=", "answer=use <postgres>",
                         "not sqlite"]
    assert pending(pg_dsn) == []


@pytest.mark.parametrize("body", [b"x" * (64 * 1024 + 1), b"bad\0text", b"\xff\xfe"],
                         ids=["too-long", "nul", "not-utf8"])
def test_a_payload_row_the_checks_refuse_is_dropped_as_a_bad_file_is(
        tmp_path: Path, pg_dsn: str, body: bytes) -> None:
    """Anyone with the store's password may write a row: it is read at most
    64 KiB + 1 bytes, checked as `--payload` is, and dropped when refused."""
    m1, m2, out = team(tmp_path, pg_dsn, block=False)
    assert m2.run("trigger", "asks").returncode == 0
    with psycopg.connect(pg_dsn) as conn:
        conn.execute("INSERT INTO loopctl.pending_texts (loop, kind, body, machine) "
                     "VALUES ('asks', 'trigger', %s, 'm2')", (body,))
    assert len(tick(m1)["fired"]) == 1
    assert seen(out) == ["payload=", "answer="]
    assert pending(pg_dsn) == []
    # Not even kept beside the run: the agent's folder never holds it.
    assert not list((m1.home / "loopctl").rglob("*.trigger"))
