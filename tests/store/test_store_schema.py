"""`loopctl store init` and `store status` against a real PostgreSQL server
(tests/store/pg_cluster.py): a versioned schema, migrations as an ordered
list, and a store that is unreachable, not set up, or newer than this code
failing closed: every command that acts on loops refuses, one line, exit 3,
and nothing is written."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from conftest import CLI
from loopctl.storage.pg import schema
from store.pg_cluster import free_port

pytestmark = pytest.mark.real_processes


def use_store(home: Path, dsn: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "loops.yaml").write_text(f"version: 1\nstore: {dsn}\nloops: {{}}\n")


def store_rows(dsn: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT version, migrated_by FROM loopctl.schema_version"
                            ).fetchall()


def test_init_creates_the_schema_once_and_status_reports_it(cli: CLI, home: Path,
                                                            pg_dsn: str) -> None:
    use_store(home, pg_dsn)
    env = {"LOOPCTL_MACHINE": "m1"}
    first = cli("store", "init", "--json", env=env, check=0)
    assert json.loads(first.stdout) == {"version": 1, "store": pg_dsn, "machine": "m1",
                                        "before": 0, "after": schema.CODE_VERSION}
    again = cli("store", "init", env=env, check=0)
    assert "already current" in again.stdout
    assert store_rows(pg_dsn) == [(schema.CODE_VERSION, "m1")]
    status = json.loads(cli("store", "status", "--json", env=env, check=0).stdout)
    assert status["ok"] and status["reachable"] and status["machine"] == "m1"
    assert status["schema_version"] == status["code_version"] == schema.CODE_VERSION
    assert status["server"]
    text = cli("store", "status", env=env, check=0).stdout
    assert f"schema:  version {schema.CODE_VERSION}" in text and "machine: m1" in text


def test_the_machine_defaults_to_the_host_name(cli: CLI, home: Path, pg_dsn: str) -> None:
    import socket

    use_store(home, pg_dsn)
    status = json.loads(cli("store", "status", "--json").stdout)
    assert status["machine"] == socket.gethostname()


def test_commands_refuse_a_store_with_no_schema_until_init(cli: CLI, home: Path,
                                                           pg_dsn: str) -> None:
    use_store(home, pg_dsn)
    for command in (("ls",), ("tick",), ("status",), ("run", "x"), ("doctor",)):
        proc = cli(*command)
        assert proc.returncode == 3, (command, proc.stdout, proc.stderr)
        assert proc.stderr.strip() == (f"loopctl: error: store {pg_dsn} has no loopctl "
                                       "schema: run `loopctl store init`")
    assert not (home / "state").exists()  # nothing acted, nothing written
    cli("store", "init", check=0)
    cli("ls", check=0)


def test_a_schema_newer_than_the_code_fails_closed_and_nothing_is_written(
        cli: CLI, home: Path, pg_dsn: str) -> None:
    use_store(home, pg_dsn)
    cli("store", "init", check=0)
    newer = schema.CODE_VERSION + 1
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE loopctl.schema_version SET version = %s, migrated_by = 'future'",
                     (newer,))
    said = (f"store {pg_dsn} has schema version {newer}, newer than this loopctl knows "
            f"({schema.CODE_VERSION}): upgrade loopctl on this machine; nothing was written")
    for command in (("ls",), ("tick",), ("start", "--name", "a", "--every", "1h", "true"),
                    ("store", "init")):
        proc = cli(*command)
        assert proc.returncode == 3, (command, proc.stdout, proc.stderr)
        assert proc.stderr.strip() == f"loopctl: error: {said}", command
    status = cli("store", "status", "--json")
    assert status.returncode == 3 and json.loads(status.stdout)["problem"] == said
    assert store_rows(pg_dsn) == [(newer, "future")]  # init wrote nothing
    assert "a:" not in (home / "loops.yaml").read_text() and not (home / "state").exists()


def test_an_unreachable_store_stops_every_command_with_one_line(cli: CLI, home: Path) -> None:
    dsn = f"postgresql://loopctl@127.0.0.1:{free_port()}/nothing"
    use_store(home, dsn)
    for command in (("ls",), ("tick",), ("status",), ("doctor",), ("store", "init")):
        proc = cli(*command)
        assert proc.returncode == 3, (command, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"loopctl: error: store {dsn} is "
                                                        "unreachable: "), (command, lines)
    status = cli("store", "status", "--json")
    assert status.returncode == 3 and not json.loads(status.stdout)["reachable"]
    assert not (home / "state").exists()


def test_two_inits_at_once_both_succeed_with_one_schema(cli: CLI, home: Path,
                                                        pg_dsn: str) -> None:
    use_store(home, pg_dsn)
    procs = [cli.popen("store", "init", "--json", stdout=-1, stderr=-1) for _ in range(4)]
    results = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sorted(r["before"] for r in results) == [0] + [schema.CODE_VERSION] * 3
    assert len(store_rows(pg_dsn)) == 1


def test_without_a_store_status_says_the_home_uses_files(cli: CLI) -> None:
    status = cli("store", "status", "--json", check=0)
    assert json.loads(status.stdout)["store"] is None
    init = cli("store", "init")
    assert init.returncode == 2 and "no store is set" in init.stderr

