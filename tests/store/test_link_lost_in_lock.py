"""A store lock whose link dies inside its transaction (a server restarted
mid-pass, DESIGN §21 "Failing closed"): the pass fails with the one line
for an unreachable store, and ending the lock commits nothing and says
the same. Before, with the server still down when the failure was
said, ending the lock sent COMMIT over no connection at all (an
AttributeError: a daemon's pass died with a traceback after a restart)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest


def test_a_link_lost_inside_the_lock_fails_the_pass_as_the_store_unreachable(
        pg_dsn: str, pg_cluster: Any) -> None:
    from loopctl.storage.pg.connect import StoreUnreachable, connect
    from loopctl.storage.pg.schema import migrate
    from loopctl.storage.pg.state import SharedState

    conn = connect(pg_dsn)
    migrate(conn, "test", pg_dsn)
    conn.close()
    shared = SharedState(pg_dsn, "m1")
    shared.begin()
    shared.read()
    pg_cluster.stop()  # the session ends; connecting again fails while it is down
    try:
        with pytest.raises(StoreUnreachable) as failed:
            shared.write({"defs_sig": [1]}, {"job": {"status": "active"}})
        assert "is unreachable" in str(failed.value)
        with pytest.raises(StoreUnreachable):
            shared.end()  # said again, as the store unreachable: nothing was committed
        with pytest.raises(StoreUnreachable):
            shared.read()  # the next pass: said the same way, not a crash
    finally:
        pg_cluster.start()
    assert shared.read()[1] == {}  # back: nothing of the failed write was committed
    shared.close()
    with psycopg.connect(pg_dsn) as check:
        assert check.execute("SELECT count(*) FROM loopctl.loop_state").fetchone() == (0,)
