"""A trigger's payload and a person's answer in the team store (DESIGN §21):
one pending text of each kind per loop (the last one given wins), taken
once by the fire that claims it, on whichever machine fires. The rows are
untrusted: at most `limit` bytes of one are ever read, and the caller
checks them as it checks the local files (storage/triggers.py)."""

from __future__ import annotations

from typing import Any

from loopctl.storage.pg.schema import SCHEMA

KINDS = ("trigger", "answer")


def save(shared: Any, loop: str, kind: str, body: bytes) -> None:
    """Keep `body` for the loop's next fire, in the store lock's transaction."""
    assert kind in KINDS
    conn = shared.transaction_conn() or shared._connection()
    shared._run(conn, f"INSERT INTO {SCHEMA}.pending_texts (loop, kind, body, machine) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (loop, kind) DO UPDATE SET "
                "body = EXCLUDED.body, machine = EXCLUDED.machine, at = now()",
                (loop, kind, body, shared.machine))


def take(shared: Any, loop: str, kind: str, limit: int) -> bytes | None:
    """The pending text, removed (once: in the lock's transaction that
    claims the fire); at most `limit` bytes of it. None: there is none."""
    conn = shared.transaction_conn() or shared._connection()
    row = shared._run(conn, f"DELETE FROM {SCHEMA}.pending_texts WHERE loop = %s AND "
                      "kind = %s RETURNING substring(body FROM 1 FOR %s)",
                      (loop, kind, limit)).fetchone()
    return None if row is None else bytes(row[0])


def drop(shared: Any, loop: str) -> None:
    """A removed loop's pending texts go with it (`rm`)."""
    conn = shared.transaction_conn() or shared._connection()
    shared._run(conn, f"DELETE FROM {SCHEMA}.pending_texts WHERE loop = %s", (loop,))
