"""Every test here may ask for `pg_cluster` (this worker's running server),
`pg_dsn` (a fresh database on it: tests/store/pg_cluster.py) or `proxy` (a
TCP relay to that server, to cut a link: tests/store/proxy.py)."""

from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from store.pg_cluster import pg_cluster, pg_dsn
from store.proxy import Proxy

__all__ = ["pg_cluster", "pg_dsn", "proxy"]


@pytest.fixture
def proxy(pg_dsn: str) -> Iterator[Proxy]:
    relay = Proxy(urlsplit(pg_dsn).port or 5432)
    relay.start()
    yield relay
    relay.close()
