"""A store home's idle `tick` (issue 54): it reads the team's one
`team_wake` row without the state lock and exits when nothing is due; a
write on any machine that makes a loop due sooner updates that row in its
transaction, so the next tick anywhere takes the full path and fires. And
one connection per process: the gate's checked one is the command's.
Several homes play several machines; every command is a real process on a
real PostgreSQL server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from conftest import wait_for
from store.machines import Machine, machines
from store.proxy import Proxy

pytestmark = pytest.mark.real_processes

STATE_LOCK = 0x73746174  # storage/pg/schema.STATE_LOCK

HOME = """\
version: 1
store: {dsn}
loops:
  hourly:
    prompt: {prompt}
    agent: shell
    every: 1h
    cwd: {cwd}
    timeout: 1m
"""


def team(tmp_path: Path, dsn: str, count: int) -> tuple[list[Machine], Path]:
    ran = tmp_path / "ran"
    homes = machines(tmp_path / "machines", count)
    for m in homes:
        m.define(HOME.format(dsn=dsn, cwd=tmp_path,
                             prompt=json.dumps(f"echo $LOOPCTL_MACHINE >> {ran}")))
    assert homes[0].run("store", "init").returncode == 0
    return homes, ran


def ran_lines(ran: Path) -> list[str]:
    return ran.read_text().splitlines() if ran.exists() else []


def first_run(m: Machine, ran: Path) -> None:
    """The loop's first run (due at once), waited for: then nothing is due for an hour."""
    proc = m.run("tick", "--wait", "--json")
    assert proc.returncode == 0 and len(json.loads(proc.stdout)["fired"]) == 1, proc.stderr
    assert ran_lines(ran) == [m.name]


def idle_tick_while_locked(m: Machine, dsn: str) -> subprocess.CompletedProcess[str] | None:
    """`tick --quiet` while the test holds the team's state lock: the idle
    exit does not wait for it (the full path would, LOCK_WAIT_S). None: it
    waited (killed at 15 s)."""
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (STATE_LOCK,))
        try:
            return m.run("tick", "--quiet", timeout=15)
        except subprocess.TimeoutExpired:
            return None


def test_an_idle_tick_exits_without_the_state_lock(tmp_path: Path, pg_dsn: str) -> None:
    (m1,), ran = team(tmp_path, pg_dsn, 1)
    first_run(m1, ran)
    done = idle_tick_while_locked(m1, pg_dsn)
    assert done is not None, "the idle tick waited for the team's state lock"
    assert done.returncode == 0 and not done.stderr, done.stderr
    assert ran_lines(ran) == ["m1"]


def test_an_idle_tick_on_a_store_that_is_down_fails_closed(tmp_path: Path,
                                                           pg_dsn: str) -> None:
    (m1,), ran = team(tmp_path, pg_dsn, 1)
    first_run(m1, ran)
    relay = Proxy(urlsplit(pg_dsn).port or 5432)
    relay.start()
    try:
        parts = urlsplit(pg_dsn)
        m1.define(HOME.format(dsn=parts._replace(
            netloc=f"{parts.username}@127.0.0.1:{relay.port}").geturl(), cwd=tmp_path,
            prompt=json.dumps(f"echo m1 >> {ran}")))
        assert m1.run("tick", "--wait").returncode == 0  # reconciled with the new loops.yaml
        relay.cut()
        proc = m1.run("tick", "--quiet")
    finally:
        relay.close()
    assert proc.returncode == 3 and "unreachable" in proc.stderr, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("act", ["trigger", "resume"])
def test_a_trigger_or_resume_on_another_machine_makes_the_next_idle_tick_fire(
        tmp_path: Path, pg_dsn: str, act: str) -> None:
    (m1, m2), ran = team(tmp_path, pg_dsn, 2)
    if act == "trigger":
        first_run(m1, ran)  # then nothing is due for an hour
    else:
        assert m1.run("pause", "hourly").returncode == 0  # due at once, but paused
    done = idle_tick_while_locked(m1, pg_dsn)
    assert done is not None and done.returncode == 0, "m1's tick did not find itself idle"
    had = ran_lines(ran)
    step = m2.run(act, "hourly")
    assert step.returncode == 0, step.stderr
    proc = m1.run("tick", "--quiet")
    assert proc.returncode == 0, proc.stderr
    wait_for(lambda: ran_lines(ran) == [*had, "m1"], timeout=30)


def test_a_scheduled_run_and_a_tick_connect_once(tmp_path: Path, pg_dsn: str) -> None:
    relay = Proxy(urlsplit(pg_dsn).port or 5432)
    relay.start()
    try:
        parts = urlsplit(pg_dsn)
        dsn = parts._replace(netloc=f"{parts.username}@127.0.0.1:{relay.port}").geturl()
        (m1,), ran = team(tmp_path, dsn, 1)
        before = relay.accepted
        proc = m1.run("run", "hourly", "--scheduled")
        assert proc.returncode == 0, proc.stderr
        assert ran_lines(ran) == ["m1"]
        run_connections = relay.accepted - before
        before = relay.accepted
        assert m1.run("tick", "--quiet").returncode == 0  # idle: one query on one connection
        tick_connections = relay.accepted - before
    finally:
        relay.close()
    assert (run_connections, tick_connections) == (1, 1)


def test_a_row_whose_time_is_not_a_number_proves_nothing(tmp_path: Path, pg_dsn: str) -> None:
    """The row is untrusted like summary.json: a NaN written time would pass
    the clock's check (every comparison with it is false)."""
    (m1,), ran = team(tmp_path, pg_dsn, 1)
    first_run(m1, ran)
    assert m1.run("trigger", "hourly").returncode == 0  # due now
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE loopctl.team_wake SET saved_at = 'NaN', "
                     "wake_at = extract(epoch FROM now()) + 3600")
    assert m1.run("tick", "--quiet").returncode == 0
    wait_for(lambda: ran_lines(ran) == ["m1", "m1"], timeout=30)


def test_libpq_and_psycopg_read_the_same_row(tmp_path: Path, pg_dsn: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The idle tick's query goes through libpq itself when it loads, else
    psycopg: both must type the row alike (a `defs_sig` read differently
    would send every tick down the full path, or worse, none)."""
    from loopctl.storage.pg import idle, libpq

    (m1,), ran = team(tmp_path, pg_dsn, 1)
    first_run(m1, ran)
    through_libpq = idle.read_row(pg_dsn, "m1")
    monkeypatch.setattr(libpq, "candidates", list)  # no libpq to load: psycopg
    through_psycopg = idle.read_row(pg_dsn, "m1")
    assert through_libpq == through_psycopg
    assert isinstance(through_libpq[5], list) and through_libpq[1] is True
    assert through_libpq[3] is False and isinstance(through_libpq[2], float)


def imports_of_idle_tick(m: Machine, dsn: str) -> list[str]:
    """The modules an idle `tick --quiet` imports (`-X importtime`), run
    while the test holds the team's state lock: it must exit at once, idle."""
    argv = m.argv("tick", "--quiet")
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (STATE_LOCK,))
        done = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], capture_output=True,
                              text=True, env=m.env(), timeout=15)
    assert done.returncode == 0, done.stderr
    return [line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
            if line.startswith("import time:") and "|" in line]


# What the file home's idle exit does not load either: the definitions (and
# what reads their cached parse), YAML, urllib (a DSN's full check), typing,
# ctypes' Python half (storage/pg/libpq.py uses its C half).
HEAVY = ("loopctl.storage.store", "loopctl.storage.definitions", "loopctl.domain.model",
         "yaml", "urllib.parse", "typing", "psycopg", "ctypes", "socket")


def test_an_idle_tick_reads_the_store_line_not_the_definitions(tmp_path: Path,
                                                               pg_dsn: str) -> None:
    (m1,), ran = team(tmp_path, pg_dsn, 1)
    first_run(m1, ran)
    loaded = imports_of_idle_tick(m1, pg_dsn)
    assert "loopctl.storage.pg.store_line" in loaded  # the list is the tick's imports
    assert not [m for m in loaded if m.startswith(HEAVY)], loaded
    assert ran_lines(ran) == ["m1"]


def test_a_store_line_the_scan_does_not_take_is_read_from_the_definitions(
        tmp_path: Path, pg_dsn: str) -> None:
    """A quoted `store:` (and one below the loops): the idle tick reads the
    definitions, and still exits idle without the lock."""
    (m1,), ran = team(tmp_path, pg_dsn, 1)
    prompt = json.dumps(f"echo $LOOPCTL_MACHINE >> {tmp_path / 'ran'}")
    m1.define(HOME.format(dsn=json.dumps(pg_dsn), cwd=tmp_path, prompt=prompt))
    first_run(m1, ran)
    assert "loopctl.storage.store" in imports_of_idle_tick(m1, pg_dsn)
    text = HOME.format(dsn="", cwd=tmp_path, prompt=prompt).replace("store: \n", "")
    m1.define(text + f"store: {pg_dsn}\n")
    assert m1.run("tick", "--quiet").returncode == 0  # reconciles the edited file
    assert "loopctl.storage.store" in imports_of_idle_tick(m1, pg_dsn)
    assert ran_lines(ran) == ["m1"]


def mapped_libpq(code: str) -> set[str]:
    """The libpq files a fresh interpreter has mapped after running `code`."""
    done = subprocess.run([sys.executable, "-c", code + "\nprint(open('/proc/self/maps').read())"],
                          capture_output=True, text=True, check=True)
    files = {line.split()[-1] for line in done.stdout.splitlines() if len(line.split()) >= 6}
    return {name for name in files if Path(name).name.startswith("libpq")}


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/self/maps")
def test_the_idle_query_loads_the_libpq_psycopg_uses() -> None:
    """Its connection is made as the full path's is (the same libpq: the
    same defaults, TLS and GSSAPI libraries)."""
    ours = mapped_libpq("from loopctl.storage.pg import libpq\nlibpq.load()")
    theirs = mapped_libpq("import psycopg\npsycopg.pq.version()")
    assert ours and ours == theirs
