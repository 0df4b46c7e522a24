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
ENV_ROWS = "LOOPCTL_STORE_LIST_ROWS"  # lowers MAX_ROWS (never raises it)
ENV_BYTES = "LOOPCTL_STORE_LIST_BYTES"  # lowers MAX_LIST_BYTES


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
                log_path: str | None, tail: bytes | None, cut: bool,
                log_size: int | None = None) -> None:
    """Upsert the run's row. A `lost` record never replaces another outcome:
    the supervisor's own record is what happened, whichever arrives last.
    The run's claim stops holding its log's live tail (storage/pg/live_tail):
    the row has the log's end now, and `log_size` where it ends."""
    conn.execute(
        f"INSERT INTO {SCHEMA}.runs AS r (loop, machine, run_id, record, log_path, log_tail, "
        "log_cut, log_size) VALUES (%s, %s, %s, %s::jsonb, %s, %s, %s, %s) "
        "ON CONFLICT (loop, machine, run_id) DO UPDATE SET record = EXCLUDED.record, "
        "log_path = EXCLUDED.log_path, log_tail = EXCLUDED.log_tail, "
        "log_cut = EXCLUDED.log_cut, log_size = EXCLUDED.log_size, recorded_at = now() "
        "WHERE EXCLUDED.record->>'outcome' IS DISTINCT FROM 'lost' "
        "OR r.record->>'outcome' = 'lost'",
        (loop, machine, run_id, record, log_path, tail, cut, log_size))
    if log_size is not None:
        conn.execute(f"UPDATE {SCHEMA}.slot_claims SET log_tail = NULL WHERE loop = %s AND "
                     "machine = %s AND run_id = %s AND log_tail IS NOT NULL",
                     (loop, machine, run_id))


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


def caps() -> tuple[int, int]:
    """The rows and record bytes one list reads: MAX_ROWS and MAX_LIST_BYTES,
    or less where the environment lowers them (a test, a slow link)."""
    from loopctl.settings import env_number

    rows = env_number(ENV_ROWS, MAX_ROWS, 1, MAX_ROWS, "a number of rows")
    size = env_number(ENV_BYTES, MAX_LIST_BYTES, 1024, MAX_LIST_BYTES, "a number of bytes")
    return int(rows), int(size)


def _newest(where: str) -> str:
    """The newest rows matching `where`, each with `kept`: within both caps.
    The first row past a cap comes back too, without its record, so the
    caller knows the list was cut; the scan stops there (index order)."""
    return (
        "SELECT left(loop, 101), left(machine, 101), left(run_id, 27), CASE WHEN kept AND "
        "size <= %(record)s THEN record::text END, left(log_path, 4097), kept FROM "
        "(SELECT *, so_far <= %(bytes)s AND n <= %(rows)s AS kept FROM "
        "(SELECT *, sum(size) OVER newest_first AS so_far, "
        "row_number() OVER newest_first AS n FROM "
        f"(SELECT *, octet_length(record::text) AS size FROM {SCHEMA}.runs WHERE {where}) "
        "AS sized WINDOW newest_first AS (ORDER BY recorded_at DESC ROWS UNBOUNDED PRECEDING) "
        "ORDER BY recorded_at DESC LIMIT %(rows)s + 1) AS numbered "
        "WHERE so_far - size <= %(bytes)s) AS newest ORDER BY recorded_at DESC")


def _listed(conn: Any, where: str, params: dict[str, Any],
            rows: int | None) -> tuple[list[tuple[str, StoredRun]], bool]:
    """(loop, run) of the newest rows within the caps (`rows`: fewer still),
    and whether the caps cut any (older rows were not read)."""
    most, size = caps()
    limit = min(rows, most) if rows else most
    found = conn.execute(_newest(where), {**params, "record": MAX_RECORD_BYTES,
                                          "bytes": size, "rows": limit}).fetchall()
    kept = [(str(row[0]), StoredRun(*row[1:5])) for row in found if row[5]]
    return kept, len(kept) < len(found)


def runs_of(conn: Any, loop: str,
            rows: int | None = None) -> tuple[list[StoredRun], bool]:
    """The loop's newest runs, from every machine, without tails: at most
    `rows` (and MAX_ROWS), fewer when their records together pass
    MAX_LIST_BYTES (2,000 rows of 1 MiB each are no list a view should
    fetch); and whether older runs were left unread."""
    found, cut = _listed(conn, "loop = %(loop)s", {"loop": loop}, rows)
    return [run for _, run in found], cut


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


def runs_since(conn: Any, loops: list[str],
               since: float) -> tuple[list[tuple[str, StoredRun]], bool]:
    """(loop, run) of every machine's runs of `loops` the store received at
    or after `since` (Unix time), newest first, without tails, within the
    caps (what `digest` reads for its window); and whether the caps cut
    older runs of the window."""
    return _listed(conn, "loop = ANY(%(loops)s) AND recorded_at >= to_timestamp(%(since)s)",
                   {"loops": loops, "since": since}, None)


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
