"""A run's log while it runs, in the team store (DESIGN §21 "Every machine's
runs, on any machine"): what `logs -f` on another machine follows.

The run's supervisor sends what its log gained since its last renewal
with that renewal (one statement: no round trip of its own), only when
the log changed, at most the last TAIL_BYTES of it: the claim's
`log_tail` holds the log's last 64 KiB and `log_size` the log's size at
the tail's end. An append is applied only where the store's `log_size` is
where the supervisor's last send ended; otherwise (a renewal whose answer
was lost) the next renewal replaces the tail whole. A follower asks for
the bytes past the offset it has printed, so an unchanged log costs it a
row of a few numbers. Everything read back is untrusted (any machine with
the password writes here): offsets are checked, sizes bounded."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Any

from loopctl.storage.pg.claims import Renewal
from loopctl.storage.pg.schema import SCHEMA

TAIL_BYTES = 64 * 1024


@dataclass
class TailUpdate:
    """What a renewal sends: `chunk`, the log's bytes from offset `start`
    to `size`; `replace`: it is the whole tail, not an append."""

    chunk: bytes
    start: int
    size: int
    replace: bool


def next_update(path: str, sent: int | None) -> TailUpdate | None:
    """What the log at `path` gained since offset `sent` (None: nothing sent
    yet, or the store's tail is not known to end there); None when it did
    not change or cannot be read (a link, a FIFO: never followed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        seen = os.fstat(fd)
        if not stat.S_ISREG(seen.st_mode) or seen.st_size == sent:
            return None
        size = seen.st_size
        whole = sent is None or size < sent or size - sent > TAIL_BYTES
        start = max(0, size - TAIL_BYTES) if whole else int(sent or 0)
        chunk = _read(fd, start, size - start)
    except OSError:
        return None
    finally:
        os.close(fd)
    return TailUpdate(chunk, start, start + len(chunk), whole)


def _read(fd: int, start: int, count: int) -> bytes:
    parts, got = [], 0
    while got < count and (part := os.pread(fd, count - got, start + got)):
        parts.append(part)
        got += len(part)
    return b"".join(parts)


_RENEW = (
    f"UPDATE {SCHEMA}.slot_claims SET renewed_at = clock_timestamp(), "
    "log_tail = CASE WHEN %(replace)s THEN %(chunk)s WHEN log_size = %(start)s THEN "
    "substring(coalesce(log_tail, ''::bytea) || %(chunk)s FROM greatest(octet_length("
    f"coalesce(log_tail, ''::bytea)) + octet_length(%(chunk)s) - {TAIL_BYTES}, 0) + 1) "
    "ELSE log_tail END, "
    "log_size = CASE WHEN %(replace)s OR log_size = %(start)s THEN %(size)s ELSE log_size END "
    "WHERE loop = %(loop)s AND run_id = %(run)s AND lost_at IS NULL "
    "AND renewed_at > clock_timestamp() - make_interval(secs => %(stale)s) "
    "RETURNING kill_requested_at IS NOT NULL, left(kill_requested_by, 100), log_size"
)


def renew_with_tail(conn: Any, loop: str, run_id: str, stale_s: float,
                    update: TailUpdate) -> tuple[Renewal, bool]:
    """claims.renew, sending `update` in the same statement; and whether
    the store's tail now ends where `update` does."""
    row = conn.execute(_RENEW, {"replace": update.replace, "chunk": update.chunk,
                                "start": update.start, "size": update.size, "loop": loop,
                                "run": run_id, "stale": stale_s}).fetchone()
    if row is None:
        return Renewal(held=False), False
    kill_by = str(row[1] or "another machine") if row[0] else None
    return Renewal(held=True, kill_by=kill_by), row[2] == update.size


@dataclass
class LiveLog:
    """One look at another machine's run: its log's bytes from offset
    `first` (past what the follower has), the claim's state, and whether
    the run's record has reached the store."""

    found: bool
    first: int = 0
    data: bytes = b""
    live: bool = False
    ended: bool = False


_LOOK = (
    "SELECT t.first, CASE WHEN t.tail_start IS NOT NULL THEN substring(t.log_tail FROM "
    "least(greatest(t.first - t.tail_start, 0), 2147483646)::integer + 1 FOR %(most)s) END, "
    "t.lost_at IS NULL AND t.renewed_at > clock_timestamp() - make_interval(secs => %(stale)s), "
    f"EXISTS (SELECT 1 FROM {SCHEMA}.runs AS r WHERE r.loop = t.loop AND "
    "r.machine = t.machine AND r.run_id = t.run_id) FROM (SELECT c.*, "
    "c.log_size - octet_length(c.log_tail) AS tail_start, "
    "greatest(%(have)s, c.log_size - octet_length(c.log_tail)) AS first "
    f"FROM {SCHEMA}.slot_claims AS c WHERE c.loop = %(loop)s AND c.run_id = %(run)s "
    "AND c.machine = %(machine)s ORDER BY c.claimed_at DESC LIMIT 1) AS t"
)


def look(conn: Any, loop: str, machine: str, run_id: str, have: int,
         stale_s: float) -> LiveLog:
    """What run `run_id` of `machine` has sent past offset `have`."""
    row = conn.execute(_LOOK, {"most": TAIL_BYTES, "stale": stale_s, "have": have,
                               "loop": loop, "run": run_id, "machine": machine}).fetchone()
    if row is None:
        return LiveLog(found=False)
    first, data = row[0], bytes(row[1]) if row[1] is not None else b""
    if not isinstance(first, int) or first < have or first > 1 << 50:
        first, data = have, b""  # no offset loopctl writes
    return LiveLog(True, first, data[:TAIL_BYTES], bool(row[2]), bool(row[3]))


def final_of(conn: Any, loop: str, machine: str,
             run_id: str) -> tuple[str | None, bytes, int | None]:
    """The run's record (None: over MAX_RECORD_BYTES), its log's last bytes
    and the log's final size (None: not said), from its row in `runs`."""
    from loopctl.storage.pg.runs import MAX_RECORD_BYTES

    row = conn.execute(
        "SELECT CASE WHEN octet_length(record::text) <= %s THEN record::text END, "
        "substring(log_tail FROM greatest(octet_length(log_tail) - %s, 0) + 1), log_size "
        f"FROM {SCHEMA}.runs WHERE loop = %s AND machine = %s AND run_id = %s",
        (MAX_RECORD_BYTES, TAIL_BYTES, loop, machine, run_id)).fetchone()
    if row is None:
        return None, b"", None
    size = row[2] if isinstance(row[2], int) and 0 <= row[2] <= 1 << 50 else None
    return row[0], bytes(row[1]) if row[1] is not None else b"", size
