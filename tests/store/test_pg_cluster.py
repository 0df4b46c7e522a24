"""The harness itself: a real server that keeps each test's rows apart and
survives a restart (the store tests restart it mid-run)."""

from __future__ import annotations

import psycopg

from store.pg_cluster import Cluster


def test_each_test_gets_an_empty_database_on_a_real_server(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        version = conn.execute("SHOW server_version_num").fetchone()
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
                              ).fetchone()
    assert version is not None and int(version[0]) >= 130000
    assert tables == (0,)


def test_a_restart_cuts_connections_and_the_server_comes_back(pg_cluster: Cluster,
                                                              pg_dsn: str) -> None:
    conn = psycopg.connect(pg_dsn, autocommit=True)
    conn.execute("CREATE TABLE kept (n int)")
    conn.execute("INSERT INTO kept VALUES (7)")
    pg_cluster.restart()
    try:
        conn.execute("SELECT 1")
        cut = False
    except psycopg.OperationalError:
        cut = True
    finally:
        conn.close()
    assert cut, "a fast restart must cut the open connection"
    with psycopg.connect(pg_dsn) as again:
        assert again.execute("SELECT n FROM kept").fetchone() == (7,)
