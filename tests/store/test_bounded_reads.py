"""A bounded read says so (DESIGN §21, issue 54): `history` and `digest`
read at most the newest 2,000 rows and 32 MiB of records from the store;
when those caps leave older runs unread, the text says so and `--json`
carries `"truncated": true`. The caps are lowered here through the
environment (LOOPCTL_STORE_LIST_ROWS, LOOPCTL_STORE_LIST_BYTES); real
`loopctl` processes, a real server."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psycopg
import pytest
from serve.support import serving

from loopctl.domain.timestamps import iso
from store.machines import Machine
from store.test_team_runs import team

pytestmark = pytest.mark.real_processes

RUNS = 5


def another_machines_runs(dsn: str) -> list[str]:
    """RUNS runs of `hourly` sent by machine m9, oldest first; their ids."""
    from loopctl.storage.pg.runs import publish_run

    now = int(time.time())
    ids = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(RUNS):
            run_id = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}-{i + 1:04d}"
            started = iso(now - 60 * (RUNS - i))
            record = {"run_id": run_id, "loop": "hourly", "outcome": "ok", "exit_code": 0,
                      "started_at": started, "ended_at": started, "padding": "x" * 600}
            publish_run(conn, "hourly", "m9", run_id, json.dumps(record), None, None, False)
            ids.append(run_id)
    return ids


def run(machine: Machine, *args: str, **env: str) -> tuple[int, str, str]:
    import subprocess

    proc = subprocess.run(machine.argv(*args), capture_output=True, text=True,
                          env={**machine.env(), **env}, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


def test_history_says_when_the_cap_left_older_runs_unread(tmp_path: Path, pg_dsn: str) -> None:
    [m1] = team(tmp_path, pg_dsn, "true", count=1)
    ids = another_machines_runs(pg_dsn)
    code, out, err = run(m1, "history", "hourly", "--limit", "0", "--json",
                         LOOPCTL_STORE_LIST_ROWS="3")
    said = json.loads(out)
    assert code == 0 and said["truncated"] is True, (out, err)
    assert [r["run_id"] for r in said["runs"]] == ids[-3:]
    code, out, _ = run(m1, "history", "hourly", "--limit", "0", LOOPCTL_STORE_LIST_ROWS="3")
    assert "(showing the newest 3 runs; older runs were not read from the team store)" in out
    # The controls: all read, or `--limit` cut the list before the cap did.
    code, out, _ = run(m1, "history", "hourly", "--limit", "0", "--json")
    assert "truncated" not in json.loads(out) and len(json.loads(out)["runs"]) == RUNS
    code, out, _ = run(m1, "history", "hourly", "--limit", "2", "--json",
                       LOOPCTL_STORE_LIST_ROWS="3")
    assert "truncated" not in json.loads(out), out
    code, out, _ = run(m1, "history", "hourly", "--limit", "0")
    assert "not read" not in out
    with serving(tmp_path, env={**m1.env(), "LOOPCTL_STORE_LIST_ROWS": "3"}) as served:
        status, _, page = served.request("GET", "/loops/hourly")
        assert status == 200 and b"showing the newest 3 runs; older runs were not read" in page
        status, said = served.json("GET", "/api/loops/hourly/runs?limit=0")
        assert status == 200 and said["truncated"] is True, said


def test_the_byte_cap_says_so_too(tmp_path: Path, pg_dsn: str) -> None:
    """Each record is 600 to 1,000 bytes: 2,000 bytes hold two of them (each under 1,000)."""
    [m1] = team(tmp_path, pg_dsn, "true", count=1)
    ids = another_machines_runs(pg_dsn)
    code, out, err = run(m1, "history", "hourly", "--limit", "0", "--json",
                         LOOPCTL_STORE_LIST_BYTES="2000")
    said = json.loads(out)
    assert said.get("truncated") is True and [r["run_id"] for r in said["runs"]] == ids[-2:], \
        (out, err)


def test_digest_says_when_the_cap_left_older_runs_of_its_window_unread(
        tmp_path: Path, pg_dsn: str) -> None:
    [m1] = team(tmp_path, pg_dsn, "true", count=1)
    another_machines_runs(pg_dsn)
    code, out, err = run(m1, "digest", "--since", "1d", "--json", LOOPCTL_STORE_LIST_ROWS="3")
    said = json.loads(out)
    assert code == 0 and said["truncated"] is True and said["total"]["runs"] == 3, (out, err)
    code, out, _ = run(m1, "digest", "--since", "1d", LOOPCTL_STORE_LIST_ROWS="3")
    assert "(counting the newest 3 runs; older runs of the window were not read" in out, out
    code, out, _ = run(m1, "digest", "--since", "1d", "--json")
    said = json.loads(out)
    assert "truncated" not in said and said["total"]["runs"] == RUNS, out


def test_a_bad_cap_is_one_line_and_exit_2(tmp_path: Path, pg_dsn: str) -> None:
    [m1] = team(tmp_path, pg_dsn, "true", count=1)
    for bad in ("0", "lots", "5000"):
        code, out, err = run(m1, "history", "hourly", LOOPCTL_STORE_LIST_ROWS=bad)
        assert code == 2 and len(err.strip().splitlines()) == 1, (code, err)
        assert "LOOPCTL_STORE_LIST_ROWS" in err and "from 1 to 2000" in err, err
