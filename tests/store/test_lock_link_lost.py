"""A store lock whose link is lost inside it (DESIGN §21 "Loop state is the
team's"): the server rolls the transaction back, so its end must say the
store was unreachable, whether the lost link left no connection (the
server still down: before, an AttributeError escaped as `unexpected
error`, seen in a daemon across a server restart) or a fresh one (the
server back: before, a COMMIT on it committed nothing and said nothing).
A real server; the link is killed with pg_terminate_backend."""

from __future__ import annotations

import psycopg
import pytest

from loopctl.storage.pg import schema
from loopctl.storage.pg.connect import StoreUnreachable
from loopctl.storage.pg.state import SharedState


def lost_inside_the_lock(dsn: str) -> SharedState:
    with psycopg.connect(dsn, autocommit=True) as admin:
        schema.migrate(admin, "m0", "test")
        shared = SharedState(dsn, "m1")
        shared.begin()
        admin.execute("SELECT pg_terminate_backend(%s)", (shared.conn.info.backend_pid,))
    with pytest.raises(StoreUnreachable):
        shared.read()  # the link found dead: connected again (the server is up)
    return shared


def test_a_lock_whose_link_was_replaced_does_not_end_as_committed(pg_dsn: str) -> None:
    shared = lost_inside_the_lock(pg_dsn)
    assert shared.conn is not None  # a fresh connection, outside any transaction
    with pytest.raises(StoreUnreachable, match="nothing of this change was written"):
        shared.end()
    shared.close()


def test_a_lock_whose_link_is_gone_ends_with_the_store_unreachable(pg_dsn: str) -> None:
    shared = lost_inside_the_lock(pg_dsn)
    shared.close()  # as _failed leaves it when connecting again failed too
    with pytest.raises(StoreUnreachable):
        shared.end()
