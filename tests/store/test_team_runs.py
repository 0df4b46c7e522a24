"""Run records, logs' tails and skipped slots in the team store (DESIGN §21,
"What lives where"): a run on one machine shows in `history`, `logs` and
`status` on another; a record settled while the store was down reaches it
on the next driver pass; what the store returns is shown as untrusted text."""

from __future__ import annotations

import json
import time
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from conftest import wait_for
from loopctl.domain.timestamps import iso
from store.machines import Machine, hourly, machines
from store.proxy import Proxy

pytestmark = pytest.mark.real_processes


def slot(hours_back: int) -> str:
    return iso((int(time.time()) // 3600 - hours_back) * 3600)


def team(tmp_path: Path, dsn: str, body: str, count: int = 2) -> list[Machine]:
    group = machines(tmp_path / "machines", count)
    for machine in group:
        machine.define(hourly(dsn, tmp_path, body))
    init = group[0].run("store", "init")
    assert init.returncode == 0, init.stderr
    return group


def run_on(machine: Machine, hours_back: int = 1) -> str:
    """Run the loop's slot `hours_back` on `machine`; its run id."""
    proc = machine.run("run", "hourly", "--scheduled", "--slot", slot(hours_back))
    assert proc.returncode == 0, proc.stderr
    [record] = [r for r in history(machine) if r["slot"] == f"schedule:{slot(hours_back)}"]
    return str(record["run_id"])


def history(machine: Machine, *args: str) -> list[dict]:
    proc = machine.run("history", "hourly", "--json", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["runs"]


def rows(dsn: str) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT machine, run_id, record->>'outcome', octet_length(log_tail), "
                            "log_path FROM loopctl.runs ORDER BY recorded_at").fetchall()


def test_a_run_on_m1_shows_on_m2_in_history_logs_and_status(tmp_path: Path,
                                                            pg_dsn: str) -> None:
    m1, m2 = team(tmp_path, pg_dsn, "echo hello from $LOOPCTL_MACHINE")
    run_id = run_on(m1)
    [(machine, stored_id, outcome, _, log_path)] = rows(pg_dsn)
    assert (machine, stored_id, outcome) == ("m1", run_id, "ok")
    # history on m2: m1's run, with its machine, in JSON and in the table.
    [seen] = history(m2)
    assert (seen["run_id"], seen["machine"], seen["outcome"]) == (run_id, "m1", "ok")
    table = m2.run("history", "hourly").stdout.splitlines()
    assert table[0].split()[-1] == "MACHINE" and table[1].split()[-1] == "m1"
    # logs on m2: m1's output from the store, and where the whole log is.
    said = m2.run("logs", "hourly")
    assert said.returncode == 0, said.stderr
    assert "hello from m1" in said.stdout
    assert f"machine m1, {log_path}" in said.stdout and log_path.startswith(str(m1.home))
    assert m2.run("logs", "hourly", "--run", run_id).stdout == said.stdout
    # status on m2 names the machine of the last run.
    status = m2.run("status", "hourly").stdout
    assert f"last run   {run_id} ok" in status and "on machine m1" in status
    assert json.loads(m2.run("status", "hourly", "--json").stdout)["last_run"]["machine"] == "m1"
    # m2 runs the next slot: both machines' runs, in time order, on either.
    later = run_on(m2, hours_back=0)
    for machine in (m1, m2):
        assert [(r["run_id"], r["machine"]) for r in history(machine)] == [
            (run_id, "m1"), (later, "m2")]
    # `logs` with no run: the team's newest, from the store on m1, its own file on m2.
    assert "hello from m2" in m1.run("logs", "hourly").stdout
    own = m2.run("logs", "hourly").stdout
    assert "hello from m2" in own and "team store" not in own


def test_the_store_keeps_the_last_64_kib_of_a_bigger_log(tmp_path: Path, pg_dsn: str) -> None:
    m1, m2 = team(tmp_path, pg_dsn, "seq 1 30000")  # 168,894 bytes of output
    run_id = run_on(m1)
    [(_, _, _, tail_bytes, log_path)] = rows(pg_dsn)
    assert Path(log_path).stat().st_size > 2 * 65536 and tail_bytes == 65536
    with psycopg.connect(pg_dsn) as conn:
        [(tail,)] = conn.execute("SELECT log_tail FROM loopctl.runs").fetchall()
    assert bytes(tail) == Path(log_path).read_bytes()[-65536:]
    out = m2.run("logs", "hourly", "--run", run_id).stdout
    assert "the last 64 KiB of its log follow" in out
    numbers = [ln for ln in out.splitlines() if ln.isdigit()]
    assert numbers[-1] == "30000" and "\n1\n" not in out and len(out) < 70_000


def agent_recorded(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT entry->'run'->'agent' FROM loopctl.loop_state").fetchall()
    return bool(found and found[0][0])


def test_a_record_settled_while_the_store_is_down_reaches_it_later(tmp_path: Path,
                                                                  pg_dsn: str) -> None:
    relay = Proxy(urlsplit(pg_dsn).port or 5432)
    relay.start()
    try:
        parts = urlsplit(pg_dsn)
        cut_dsn = parts._replace(netloc=f"{parts.username}@127.0.0.1:{relay.port}").geturl()
        started, go = tmp_path / "started", tmp_path / "go"
        body = f"touch {started}; while [ ! -e {go} ]; do sleep 0.05; done; echo done"
        [m1] = team(tmp_path, cut_dsn, body, count=1)
        proc = m1.popen("run", "hourly", "--scheduled", "--slot", slot(0))
        wait_for(started.exists, timeout=30)
        wait_for(lambda: agent_recorded(pg_dsn), timeout=30)  # its launch committed
        relay.cut()  # the run ends with the store unreachable
        go.touch()
        # Its state is the team's, in the store: it cannot settle there now
        # (exit 3, one line); the run's record is kept here, owed to the team.
        assert proc.wait(timeout=60) == 3, proc.communicate()
        said = proc.communicate()[1]
        assert "unreachable" in said
        records = list((m1.home / "loopctl" / "state" / "runs" / "hourly").glob("*.json"))
        assert [json.loads(p.read_text())["outcome"] for p in records] == ["ok"], said
        assert rows(pg_dsn) == []  # the local file is the record; the team waits
        owed = (m1.home / "loopctl" / "state" / "team-outbox").iterdir()
        assert f"run~hourly~{records[0].stem}" in [p.name for p in owed]
        relay.mend()
        # Nothing is due (the run took this hour's slot), yet cron's idle
        # tick takes the full path while the outbox is not empty: it sends.
        tick = m1.run("tick", "--quiet")
        assert tick.returncode == 0 and tick.stdout == "", tick.stderr
        sent = [(m, r) for m, r, *_ in rows(pg_dsn)]
        assert ("m1", records[0].stem) in sent
        # That pass found the run's supervisor gone: the run is settled, once,
        # from the record it kept.
        with psycopg.connect(pg_dsn) as conn:
            [entry] = [r[0] for r in conn.execute("SELECT entry FROM loopctl.loop_state")]
        assert not entry.get("run") and entry["last_run_id"] == records[0].stem, entry
        assert list((m1.home / "loopctl" / "state" / "team-outbox").iterdir()) == []
    finally:
        relay.close()


def test_a_lost_record_and_the_supervisors_own_end_as_one_row(tmp_path: Path,
                                                               pg_dsn: str) -> None:
    """Whichever arrives last: the supervisor's record is what happened."""
    from loopctl.storage.pg.runs import publish_run, runs_of

    team(tmp_path, pg_dsn, "true", count=1)
    lost, ok = json.dumps({"outcome": "lost"}), json.dumps({"outcome": "ok"})
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for order, run_id in (((lost, ok), "20261201T000000Z-0001"),
                              ((ok, lost), "20261201T000000Z-0002")):
            for record in order:
                publish_run(conn, "hourly", "m1", run_id, record, "/x.log", b"tail", False)
        stored, _ = runs_of(conn, "hourly")
        found = {(r.machine, r.run_id): json.loads(r.record or "") for r in stored}
    assert found == {("m1", "20261201T000000Z-0001"): {"outcome": "ok"},
                     ("m1", "20261201T000000Z-0002"): {"outcome": "ok"}}


def test_a_skipped_slot_on_m2_shows_on_m1(tmp_path: Path, pg_dsn: str) -> None:
    m1, m2 = team(tmp_path, pg_dsn, "echo one")
    run_on(m1)
    m2.define(hourly(pg_dsn, tmp_path, "echo another"))  # differs from the team's
    refused = m2.run("run", "hourly", "--scheduled", "--slot", slot(0))
    assert refused.returncode == 3 and "definition differs" in refused.stderr
    assert m2.run("tick").returncode == 0  # its pass sends what m2 owes the team
    proc = m1.run("history", "hourly", "--skipped", "--json")
    entries = json.loads(proc.stdout)["skipped_slots"]
    assert {e["machine"] for e in entries if e["reason"] == "definition_differs"} == {"m2"}
    assert {e["machine"] for e in entries} == {"m1", "m2"}  # m1's own missed slots too
    assert "machine m2" in m1.run("history", "hourly", "--skipped").stdout


HOSTILE = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x1b[31mred\u202egnp.exe\r\x9b31m"


def test_a_hostile_row_in_the_store_is_shown_safely(tmp_path: Path, pg_dsn: str) -> None:
    [m1] = team(tmp_path, pg_dsn, "true", count=1)
    run_id = "20261201T000000Z-0001"
    record = {"outcome": "failed", "note": HOSTILE * 100, "started_at": "2026-12-01T00:00:00Z",
              "exit_code": 1, "result": HOSTILE}
    huge = {"outcome": "ok", "started_at": "2026-12-01T00:00:01Z", "result": "x" * 3_000_000}
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        put = ("INSERT INTO loopctl.runs (loop, machine, run_id, record, log_path, log_tail) "
               "VALUES ('hourly', %s, %s, %s::jsonb, %s, %s)")
        conn.execute(put, ("m9", run_id, json.dumps(record), "/l\x1b[2J.log",
                           (HOSTILE * 20_000).encode()))
        conn.execute(put, ("m8", "20261201T000000Z-0002", json.dumps(huge), None, b""))
        conn.execute(put, ("bad\nname", "20261201T000000Z-0003", "{}", None, b""))
        conn.execute(put, ("m7", "../../etc/passwd", "{}", None, b""))
    for args in (("history", "hourly"), ("status", "hourly"),
                 ("logs", "hourly", "--run", run_id)):
        proc = m1.run(*args)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (args, proc.stderr)
        for bad in ("\x1b", "\x9b", "\u202e", "\r", "\x07"):
            assert bad not in proc.stdout, (args, bad)
        assert len(proc.stdout) < 120_000, args
    # A record with no time to sort by (not fetched) comes first.
    runs = history(m1)
    assert [(r["machine"], r["outcome"]) for r in runs] == [("m8", "unknown"), ("m9", "failed")]
    assert "the record itself" in runs[0]["damaged"]  # over 1 MiB: not fetched
    logs = m1.run("logs", "hourly", "--run", run_id).stdout
    assert "machine m9, /l.log" in logs and "red" in logs


def test_a_skipped_slot_row_is_checked_field_by_field(tmp_path: Path, pg_dsn: str) -> None:
    """A row of `skipped_slots` is untrusted (any machine writes the store):
    one loopctl would not write is left out of `history --skipped`, whole."""
    from loopctl.storage.pg.runs import publish_skip

    [m1] = team(tmp_path, pg_dsn, "true", count=1)
    good = {"slot": "schedule:2026-12-01T00:00:00Z", "reason": "definition_differs",
            "at": "2026-12-01T00:00:05Z"}
    bad = [{**good, "reason": "coffee"}, {**good, "slot": HOSTILE}, {**good, "count": "lots"},
           {**good, "at": HOSTILE}, {**good, "run_id": "../../x"}, {"reason": "missed"}]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for n, entry in enumerate([good, *bad]):
            publish_skip(conn, f"{n:024x}", "hourly", "m9", json.dumps(entry))
    proc = m1.run("history", "hourly", "--skipped", "--json")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)["skipped_slots"] == [{**good, "machine": "m9"}]


def test_a_run_that_is_nobodys_is_still_exit_4(tmp_path: Path, pg_dsn: str) -> None:
    [m1] = team(tmp_path, pg_dsn, "true", count=1)
    proc = m1.run("logs", "hourly", "--run", "20261201T000000Z-0009")
    assert proc.returncode == 4 and "no log for run" in proc.stderr


def test_serve_on_m2_shows_m1s_runs_escaped(tmp_path: Path, pg_dsn: str) -> None:
    from serve.support import serving

    m1, m2 = team(tmp_path, pg_dsn, "echo '<b>hi</b> from' $LOOPCTL_MACHINE")
    run_id = run_on(m1)
    with serving(tmp_path, secret=False, env=m2.env()) as served:
        status, found = served.json("GET", "/api/loops/hourly/runs")
        assert status == 200 and [(r["run_id"], r["machine"]) for r in found["runs"]] == [
            (run_id, "m1")]
        status, _, page = served.request("GET", "/loops/hourly")
        assert status == 200 and b"<th>machine</th>" in page and b"<td>m1</td>" in page
        status, _, page = served.request("GET", f"/loops/hourly/runs/{run_id}")
        assert status == 200, page
        assert b"&lt;b&gt;hi&lt;/b&gt; from m1" in page and b"<b>hi" not in page
        assert b"the whole log is on machine m1, " + str(m1.home).encode() in page


def test_a_list_stops_at_its_byte_budget(tmp_path: Path, pg_dsn: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """2,000 rows of 1 MiB each are never fetched for one view: the newest
    rows come while their records together fit the budget."""
    from loopctl.storage.pg import runs as stored

    team(tmp_path, pg_dsn, "true", count=1)
    monkeypatch.setattr(stored, "MAX_LIST_BYTES", 250_000)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for i in range(5):
            stored.publish_run(conn, "hourly", "m9", f"20261201T000000Z-000{i}",
                               json.dumps({"outcome": "ok", "result": "x" * 100_000}),
                               None, None, False)
        found, cut = stored.runs_of(conn, "hourly")
    assert [r.run_id for r in found] == ["20261201T000000Z-0004", "20261201T000000Z-0003"]
    assert cut
