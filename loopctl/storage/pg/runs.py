"""Run records and skipped slots in the team store (DESIGN §21): what each
machine sends (engine side: storage/team_outbox.py) and what the team's
views read back (commands/team_runs.py).

What comes back is untrusted: any machine with the store's password can
write any row. Reads are bounded here, in SQL (a 100 MiB record is never
fetched); the callers clean what they get like a file an agent could write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loopctl.storage.pg.schema import SCHEMA

MAX_RECORD_BYTES = 1024 * 1024  # storage/runs.MAX_RECORD_BYTES: a record as big as a file's
TAIL_BYTES = 64 * 1024  # the last 64 KiB of a run's log travel with its record
MAX_ROWS = 2000  # runs or skipped slots one view reads
MAX_LIST_BYTES = 32 * 1024 * 1024  # all the records of one list, together


@dataclass
class StoredRun:
    """One row: its record's text (None when over MAX_RECORD_BYTES) and,
    when asked for, its log's tail (at most TAIL_BYTES)."""

    machine: str
    run_id: str
    record: str | None
    log_path: str | None
    tail: bytes | None = None
    cut: bool = False


def publish_run(conn: Any, loop: str, machine: str, run_id: str, record: str,
                log_path: str | None, tail: bytes | None, cut: bool) -> None:
    """Upsert the run's row. A `lost` record never replaces another outcome:
    the supervisor's own record is what happened, whichever arrives last."""
    conn.execute(
        f"INSERT INTO {SCHEMA}.runs AS r (loop, machine, run_id, record, log_path, log_tail, "
        "log_cut) VALUES (%s, %s, %s, %s::jsonb, %s, %s, %s) "
        "ON CONFLICT (loop, machine, run_id) DO UPDATE SET record = EXCLUDED.record, "
        "log_path = EXCLUDED.log_path, log_tail = EXCLUDED.log_tail, "
        "log_cut = EXCLUDED.log_cut, recorded_at = now() "
        "WHERE EXCLUDED.record->>'outcome' IS DISTINCT FROM 'lost' "
        "OR r.record->>'outcome' = 'lost'",
        (loop, machine, run_id, record, log_path, tail, cut))


def publish_skip(conn: Any, skip_id: str, loop: str, machine: str, entry: str) -> None:
    """One skipped slot; sent twice (an outage between insert and the
    marker's removal), it is still one row."""
    conn.execute(
        f"INSERT INTO {SCHEMA}.skipped_slots (skip_id, loop, machine, entry) "
        "VALUES (%s, %s, %s, %s::jsonb) ON CONFLICT (skip_id) DO NOTHING",
        (skip_id, loop, machine, entry))


# The record's text only when small enough; machine and run id cut to a
# length no valid one exceeds (the caller refuses what is longer).
_ROW = ("left(machine, 101), left(run_id, 27), "
        "CASE WHEN octet_length(record::text) <= %s THEN record::text END, left(log_path, 4097)")


def runs_of(conn: Any, loop: str, rows: int = MAX_ROWS) -> list[StoredRun]:
    """The loop's newest `rows` runs, from every machine, without tails;
    fewer when their records together pass MAX_LIST_BYTES (2,000 rows of
    1 MiB each are no list a view should fetch)."""
    found = conn.execute(
        f"SELECT {_ROW} FROM (SELECT *, sum(octet_length(record::text)) OVER "
        "(ORDER BY recorded_at DESC ROWS UNBOUNDED PRECEDING) AS so_far "
        f"FROM {SCHEMA}.runs WHERE loop = %s ORDER BY recorded_at DESC LIMIT %s) AS newest "
        "WHERE so_far <= %s ORDER BY recorded_at DESC",
        (MAX_RECORD_BYTES, loop, rows, MAX_LIST_BYTES)).fetchall()
    return [StoredRun(*row) for row in found]


def run_of(conn: Any, loop: str, run_id: str) -> list[StoredRun]:
    """Every machine's run `run_id` of `loop` (ids are per machine), newest
    first, each with at most TAIL_BYTES of its log's tail."""
    found = conn.execute(
        f"SELECT {_ROW}, substring(log_tail from greatest(octet_length(log_tail) - %s, 0) + 1), "
        f"log_cut OR octet_length(log_tail) > %s FROM {SCHEMA}.runs "
        "WHERE loop = %s AND run_id = %s ORDER BY recorded_at DESC LIMIT 3",
        (MAX_RECORD_BYTES, TAIL_BYTES, TAIL_BYTES, loop, run_id)).fetchall()
    return [StoredRun(row[0], row[1], row[2], row[3], cut=bool(row[5]),
                      tail=bytes(row[4]) if row[4] is not None else None) for row in found]


def skips_of(conn: Any, loop: str, rows: int = MAX_ROWS) -> list[tuple[str, str | None]]:
    """(machine, entry text or None when too big) of the newest skipped slots."""
    found = conn.execute(
        "SELECT left(machine, 101), CASE WHEN octet_length(entry::text) <= 4096 "
        f"THEN entry::text END FROM {SCHEMA}.skipped_slots WHERE loop = %s "
        "ORDER BY recorded_at DESC LIMIT %s", (loop, rows)).fetchall()
    return [(str(m), e) for m, e in found]


def runs_since(conn: Any, loops: list[str], since: float,
               rows: int = MAX_ROWS) -> list[tuple[str, StoredRun]]:
    """(loop, run) of every machine's runs of `loops` the store received at
    or after `since` (Unix time), newest first, without tails: at most
    `rows`, fewer when their records together pass MAX_LIST_BYTES (what
    `digest` reads for its window)."""
    found = conn.execute(
        f"SELECT left(loop, 101), {_ROW} FROM (SELECT *, sum(octet_length(record::text)) OVER "
        "(ORDER BY recorded_at DESC ROWS UNBOUNDED PRECEDING) AS so_far "
        f"FROM {SCHEMA}.runs WHERE loop = ANY(%s) AND recorded_at >= to_timestamp(%s) "
        "ORDER BY recorded_at DESC LIMIT %s) AS newest "
        "WHERE so_far <= %s ORDER BY recorded_at DESC",
        (MAX_RECORD_BYTES, loops, since, rows, MAX_LIST_BYTES)).fetchall()
    return [(str(row[0]), StoredRun(*row[1:])) for row in found]


def machines_of(conn: Any, wanted: list[tuple[str, str]]) -> dict[str, str]:
    """Each loop's machine that ran its run `run_id` ((loop, run_id) pairs;
    ids are per machine, so the newest row of that id wins), cut to a length
    no valid machine name exceeds (the caller refuses what is longer)."""
    if not wanted:
        return {}
    loops, ids = [w[0] for w in wanted], [w[1] for w in wanted]
    found = conn.execute(
        f"SELECT DISTINCT ON (r.loop) r.loop, left(r.machine, 101) FROM {SCHEMA}.runs AS r "
        "JOIN unnest(%s::text[], %s::text[]) AS w(loop, run_id) "
        "ON r.loop = w.loop AND r.run_id = w.run_id ORDER BY r.loop, r.recorded_at DESC",
        (loops, ids)).fetchall()
    return {str(loop): str(machine) for loop, machine in found}
