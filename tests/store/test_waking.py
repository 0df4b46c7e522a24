"""Waking across machines (DESIGN §21 "Waking", issue 54): a daemon in a
store home LISTENs on `loopctl_wake` and runs a pass within a second of a
NOTIFY from any machine, survives the server's restart, asks the store
nothing while idle, and the commands that change what other machines act
on send the NOTIFY. Real daemons and commands (`python -m loopctl`), a real
server; every wait polls an event with a deadline."""

from __future__ import annotations

import json
import select
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from conftest import wait_for
from store.machines import Machine, machines
from store.proxy import Proxy

pytestmark = pytest.mark.real_processes

ON_DEMAND = """\
version: 1
store: {dsn}
loops:
  nudged:
    prompt: echo $LOOPCTL_RUN_ID >> {ran}
    agent: shell
    on_demand: true
    cwd: {cwd}
    timeout: 1m
    max_runs: 1000
"""
CONTRACT = 1.0  # seconds from NOTIFY to the daemon's pass (DESIGN §21)


def define(machine: Machine, dsn: str, tmp_path: Path) -> None:
    machine.define(ON_DEMAND.format(dsn=dsn, ran=tmp_path / f"ran-{machine.name}",
                                    cwd=tmp_path))


class Daemon:
    """A machine's daemon, its stderr in a file the test reads."""

    def __init__(self, machine: Machine, log: Path, **env: str) -> None:
        self.log = log
        with open(log, "w") as out:
            self.proc = subprocess.Popen(machine.argv("daemon"), stdout=out, stderr=out,
                                         env={**machine.env(), **env})

    def text(self) -> str:
        return self.log.read_text()

    def count(self, words: str) -> int:
        return self.text().count(words)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture
def one(tmp_path: Path, pg_dsn: str) -> Iterator[tuple[Machine, Daemon]]:
    """Machine m1, its store initialised, its daemon listening."""
    [m1] = machines(tmp_path / "machines", 1)
    define(m1, pg_dsn, tmp_path)
    assert m1.run("store", "init").returncode == 0
    daemon = Daemon(m1, tmp_path / "daemon.log")
    try:
        wait_for(lambda: "listening for wakes on store" in daemon.text(), timeout=30)
        yield m1, daemon
    finally:
        daemon.stop()


def notify(dsn: str, payload: str) -> float:
    """NOTIFY from a connection of its own (another machine's); when it was
    committed, by this process's monotonic clock."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_notify('loopctl_wake', %s)", (payload,))
        return time.monotonic()


def woken_within(daemon: Daemon, dsn: str, loop: str) -> float:
    """Seconds from a NOTIFY for `loop` to the daemon's line saying it woke
    for it (said as the pass starts)."""
    line = f"woken by the store for {loop}"
    before = daemon.count(line)
    sent = notify(dsn, loop)
    wait_for(lambda: daemon.count(line) > before, timeout=30, interval=0.005)
    return time.monotonic() - sent


def test_a_notify_from_another_machine_wakes_the_daemon_within_a_second(
        one: tuple[Machine, Daemon], pg_dsn: str) -> None:
    _, daemon = one
    latencies = [woken_within(daemon, pg_dsn, f"loop-{i}") for i in range(3)]
    # The contract as a ceiling, never a speed claim (bench/store.py measures).
    assert max(latencies) < CONTRACT, latencies
    assert daemon.proc.poll() is None


def test_a_payload_cannot_forge_a_log_line(one: tuple[Machine, Daemon], pg_dsn: str) -> None:
    """Anyone who may write to the store may notify anything: the line shows
    it cut and printable, on one line."""
    _, daemon = one
    notify(pg_dsn, "x\n2026-01-01T00:00:00 loopctl daemon: forged\x1b[31m" + "y" * 500)
    wait_for(lambda: "woken by the store for x?" in daemon.text(), timeout=30)
    [line] = [ln for ln in daemon.text().splitlines() if "woken by the store" in ln]
    assert "forged" in line and "\x1b" not in line and len(line) < 200, line
    assert not [ln for ln in daemon.text().splitlines() if ln.startswith("2026-01-01")]


def test_the_daemon_survives_a_store_restart_and_wakes_again(
        one: tuple[Machine, Daemon], pg_dsn: str, pg_cluster: Any) -> None:
    _, daemon = one
    pg_cluster.restart()
    # The property is that it comes back, not how soon: a restart slowed by
    # a loaded machine can push the reconnect to the backoff's later tries
    # (1 + 2 + 4 + 8 + 16 + 30 s, each try up to its connect timeout).
    try:
        wait_for(lambda: [ln for ln in daemon.text().splitlines()
                          if "listening for wakes on store" in ln and ln.endswith(" again")],
                 timeout=120)
    except AssertionError:  # what the daemon said, to tell why
        raise AssertionError(daemon.text()[-3000:]) from None
    assert daemon.count("not listening for wakes") == 1, daemon.text()
    assert woken_within(daemon, pg_dsn, "after-restart") < CONTRACT
    assert daemon.proc.poll() is None


def test_a_flood_of_notifies_costs_few_passes(one: tuple[Machine, Daemon],
                                              pg_dsn: str) -> None:
    """A burst is drained into one pass, and passes for wakes are at least
    0.2 s apart however many arrive: whoever may write to the store cannot
    make a daemon spin. A line names at most five loops."""
    _, daemon = one
    started = time.monotonic()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for _ in range(400):  # each its own transaction: 400 notifies
            conn.execute("SELECT pg_notify('loopctl_wake', 'flood')")
        conn.execute("SELECT pg_notify('loopctl_wake', 'last')")
    wait_for(lambda: "last" in daemon.text(), timeout=30)
    took = time.monotonic() - started
    lines = [ln for ln in daemon.text().splitlines() if "woken by the store" in ln]
    assert len(lines) <= took / 0.2 + 2, (took, lines)
    with psycopg.connect(pg_dsn, autocommit=True) as conn, conn.transaction():
        for i in range(20):  # one transaction: delivered together
            conn.execute("SELECT pg_notify('loopctl_wake', %s)", (f"many-{i}",))
    wait_for(lambda: "for many-0" in daemon.text(), timeout=30)
    [line] = [ln for ln in daemon.text().splitlines() if "for many-0" in ln]
    assert line.endswith("many-4, ...") and "many-5" not in line, line


def heartbeat(machine: Machine) -> float:
    lease = machine.home / "loopctl" / "state" / "lease.json"
    try:
        return float(json.loads(lease.read_text())["heartbeat"])
    except (OSError, ValueError, KeyError):
        return 0.0


def next_beat(machine: Machine, after: float) -> float:
    """The daemon's next heartbeat after `after` (its lease file's)."""
    return float(wait_for(lambda: (beat := heartbeat(machine)) > after and beat, timeout=30))


def test_an_idle_daemon_sends_the_store_nothing(tmp_path: Path, pg_dsn: str) -> None:
    """Across several heartbeats (a short lease makes them often) the daemon
    sends no byte to the store: no query, no poll; a NOTIFY still wakes it.
    Its link goes through a proxy that counts what clients send."""
    proxy = Proxy(urlsplit(pg_dsn).port or 5432)
    proxy.start()
    try:
        parts = urlsplit(pg_dsn)
        dsn = parts._replace(netloc=f"{parts.username}@127.0.0.1:{proxy.port}").geturl()
        [m1] = machines(tmp_path / "machines", 1)
        define(m1, dsn, tmp_path)
        assert m1.run("store", "init").returncode == 0
        daemon = Daemon(m1, tmp_path / "daemon.log", LOOPCTL_LEASE_TTL="1.5")
        try:
            wait_for(lambda: "listening for wakes" in daemon.text(), timeout=30)
            # From the first heartbeat after the daemon listens, through three more.
            beat = next_beat(m1, next_beat(m1, 0.0))
            sent = proxy.sent
            for _ in range(3):
                beat = next_beat(m1, beat)
            assert proxy.sent == sent, f"{proxy.sent - sent} bytes sent while idle"
            assert woken_within(daemon, pg_dsn, "still-listening") < CONTRACT
        finally:
            daemon.stop()
    finally:
        proxy.close()


def next_notify(conn: Any, timeout: float = 30) -> str:
    """The next payload on `loopctl_wake` (the test's own LISTEN)."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        select.select([conn.fileno()], [], [], left)
        for note in conn.notifies(timeout=0):
            return str(note.payload)
    raise AssertionError("no NOTIFY within the deadline")


@pytest.mark.slow
def test_commands_that_change_a_loop_tell_the_other_machines(
        tmp_path: Path, pg_dsn: str) -> None:
    """Each command that changes what another machine must act on sends one
    NOTIFY naming its loop, after its change is written."""
    [m2] = machines(tmp_path / "machines", 1)
    define(m2, pg_dsn, tmp_path)
    assert m2.run("store", "init").returncode == 0
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("LISTEN loopctl_wake")
        for args in (("trigger", "nudged"), ("pause", "nudged"), ("resume", "nudged"),
                     ("update", "nudged", "--timeout", "2m"),
                     ("start", "--name", "fresh", "--every", "1h", "--cwd", str(tmp_path),
                      "--agent", "shell", "true"),
                     ("rm", "fresh")):
            done = m2.run(*args)
            assert done.returncode == 0, (args, done.stderr)
            assert next_notify(conn) == ("fresh" if "fresh" in args else "nudged"), args


FILES_ONLY = """\
version: 1
loops:
  nudged:
    prompt: echo ran >> {ran}
    agent: shell
    on_demand: true
    cwd: {cwd}
    timeout: 1m
"""


def test_a_daemon_in_a_home_of_files_never_loads_the_store(tmp_path: Path) -> None:
    """Through a pass that fires: neither psycopg nor the store's waking
    module is imported (`-X importtime` lists every import)."""
    [m1] = machines(tmp_path / "machines", 1)
    ran = tmp_path / "ran"
    m1.define(FILES_ONLY.format(ran=ran, cwd=tmp_path))
    assert m1.run("trigger", "nudged").returncode == 0
    argv = m1.argv("daemon")
    daemon = subprocess.Popen([argv[0], "-X", "importtime", *argv[1:]], text=True,
                              stderr=subprocess.PIPE, env=m1.env())
    try:
        wait_for(ran.exists, timeout=30)
    finally:
        daemon.terminate()
        _, err = daemon.communicate(timeout=30)
    loaded = [line.rsplit("|", 1)[1].strip() for line in err.splitlines()
              if line.startswith("import time:") and "|" in line]
    assert "loopctl.engine.store_wake" in loaded  # the list is the daemon's imports
    assert not [m for m in loaded if m.startswith(("psycopg", "loopctl.storage.pg.wake",
                                                   "loopctl.storage.pg.connect"))]


def test_a_notify_that_fails_never_fails_the_command(tmp_path: Path, pg_dsn: str,
                                                     pg_cluster: Any) -> None:
    """A role that may write the store's tables but not notify: the trigger
    stands, exit 0, nothing on stderr."""
    database = urlsplit(pg_dsn).path.lstrip("/")
    [m2] = machines(tmp_path / "machines", 1)
    define(m2, pg_dsn, tmp_path)
    assert m2.run("store", "init").returncode == 0
    role = f"quiet_{database}"
    for statement in (f'CREATE ROLE "{role}" LOGIN',
                      "REVOKE EXECUTE ON FUNCTION pg_notify(text, text) FROM PUBLIC",
                      f'GRANT USAGE ON SCHEMA loopctl TO "{role}"',
                      f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA loopctl '
                      f'TO "{role}"'):
        pg_cluster.sql(statement, database)
    define(m2, pg_cluster.dsn(database, user=role), tmp_path)
    done = m2.run("trigger", "nudged", "--json")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert json.loads(done.stdout)["accepted"] is True
