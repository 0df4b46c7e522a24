"""One view across machines (DESIGN §21, issue 54 item 6): `digest`, `ls`
and `/metrics` on any machine show every machine's runs and which machine
ran each; what the store returns is shown safely (or not at all)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import psycopg
import pytest
from serve.support import serving

from conftest import tool, wait_for
from store.machines import Machine
from store.test_team_runs import agent_recorded, run_on, slot, team

pytestmark = pytest.mark.real_processes

# The agent says which machine it ran on, as its decision's summary.
SAYS = ('printf \'{"decision":"continue","summary":"said on %s"}\' "$LOOPCTL_MACHINE" '
        '> "$LOOPCTL_DECISION_FILE"')


def digest(machine: Machine) -> dict:
    proc = machine.run("digest", "--since", "7d", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def ls_json(machine: Machine) -> dict:
    proc = machine.run("ls", "--json")
    assert proc.returncode == 0, proc.stderr
    [loop] = json.loads(proc.stdout)["loops"]
    return loop


def ls_row(machine: Machine) -> dict[str, str]:
    proc = machine.run("ls")
    assert proc.returncode == 0, proc.stderr
    head, row = proc.stdout.splitlines()
    at = [m.start() for m in re.finditer(r"\S+", head)]  # columns start under their header
    return {head[a:b].strip(): row[a:b].strip() for a, b in zip(at, [*at[1:], None], strict=True)}


def test_digest_and_ls_show_every_machines_runs_with_their_machine(tmp_path: Path,
                                                                 pg_dsn: str) -> None:
    m1, m2 = team(tmp_path, pg_dsn, SAYS)
    first, second = run_on(m1, hours_back=1), run_on(m2, hours_back=0)
    for machine in (m1, m2):
        report = digest(machine)
        [loop] = report["loops"]
        assert loop["runs"] == {"ok": 2} and report["total"]["runs"] == 2
        assert [(d["run_id"], d["machine"], d["summary"]) for d in loop["decisions"]] == [
            (first, "m1", "said on m1"), (second, "m2", "said on m2")]
        text = machine.run("digest", "--since", "7d").stdout
        assert "said on m1 (on m1)" in text and "said on m2 (on m2)" in text
        # ls: the machine of the last run (m2's), in the table and the JSON.
        assert ls_json(machine)["machine"] == "m2"
        assert ls_row(machine)["MACHINE"] == "m2"


def test_what_the_store_says_of_a_machine_is_shown_safely(tmp_path: Path, pg_dsn: str) -> None:
    m1, m2 = team(tmp_path, pg_dsn, SAYS)
    run_on(m2, hours_back=0)
    hostile = "m2\x1b]0;owned\x07\u202e"
    with psycopg.connect(pg_dsn) as conn:
        conn.execute("UPDATE loopctl.runs SET machine = %s", (hostile,))
    # Not a name loopctl gives: no machine shown, no escape printed.
    table = m1.run("ls")
    assert table.returncode == 0 and "\x1b" not in table.stdout and "\u202e" not in table.stdout
    assert ls_row(m1)["MACHINE"] == "-" and ls_json(m1)["machine"] is None
    said = m1.run("digest", "--since", "7d")
    assert said.returncode == 0 and "\x1b" not in said.stdout and "owned" not in said.stdout
    assert digest(m1)["total"]["runs"] == 0  # a row that names no machine is not counted


def metrics(machine: Machine, tmp_path: Path) -> str:
    with serving(tmp_path, env=machine.env()) as served:
        status, _, body = served.request("GET", "/metrics")
    assert status == 200, body
    return body.decode()


def test_metrics_on_any_machine_show_the_team_and_the_machine_of_a_run(tmp_path: Path,
                                                                      pg_dsn: str) -> None:
    promtool = tool("promtool")
    started, go = tmp_path / "started", tmp_path / "go"
    body = f"touch {started}; while [ ! -e {go} ]; do sleep 0.05; done"
    m1, m2 = team(tmp_path, pg_dsn, body)
    run = m2.popen("run", "hourly", "--scheduled", "--slot", slot(0))
    try:
        wait_for(started.exists, timeout=30)
        wait_for(lambda: agent_recorded(pg_dsn), timeout=30)
        seen = metrics(m1, tmp_path)
        assert 'loopctl_run_in_flight{loop="hourly",machine="m2"} 1' in seen
        assert 'loopctl_info{machine="m1"} 1' in seen
        # ls on m1: the machine of the run in flight (the loop has no last run).
        assert ls_row(m1)["MACHINE"] == "m2" and ls_json(m1)["machine"] == "m2"
        # A machine name from the store that needs escaping is escaped.
        with psycopg.connect(pg_dsn) as conn:
            conn.execute("UPDATE loopctl.loop_state SET entry = jsonb_set(entry, "
                         "'{run,machine}', to_jsonb(%s::text))", ('m"2\\',))
        hostile = metrics(m1, tmp_path)
        assert 'loopctl_run_in_flight{loop="hourly",machine="m\\"2\\\\"} 1' in hostile
        checked = subprocess.run([promtool, "check", "metrics"], input=hostile, text=True,
                                 capture_output=True, timeout=60)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        with psycopg.connect(pg_dsn) as conn:  # as it was, for the run to settle
            conn.execute("UPDATE loopctl.loop_state SET entry = jsonb_set(entry, "
                         "'{run,machine}', '\"m2\"')")
    finally:
        go.touch()
        run.wait(timeout=60)
    # The run ended: nothing in flight; the team's counters are the same on
    # either machine (one target is enough to scrape).
    ones = [metrics(m, tmp_path) for m in (m1, m2)]
    assert "loopctl_run_in_flight{" not in ones[0]
    counted = [sorted(re.findall(r"^loopctl_runs_total\{.*$", text, re.M)) for text in ones]
    assert counted[0] == counted[1] and counted[0], ones[0]
