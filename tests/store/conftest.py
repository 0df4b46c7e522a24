"""Every test here may ask for `pg_cluster` (this worker's running server) or
`pg_dsn` (a fresh database on it): tests/store/pg_cluster.py."""

from store.pg_cluster import pg_cluster, pg_dsn

__all__ = ["pg_cluster", "pg_dsn"]
