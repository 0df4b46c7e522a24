"""Sending this machine's run records and skipped slots to the team store
(DESIGN §21), from the outbox storage/team_outbox.py keeps.

The rule: a record is the local file's, and is the team's as soon as a
sender reaches the store. Senders are the run's supervisor, right after it
settles, and every driver pass (`tick`, a daemon's pass, `run`), after its
lock is released: so a record settled while the store was down reaches it
on the first pass that finds the store up. Sending is best effort and never
fails its caller: a store that cannot be reached leaves the markers for the
next sender; a marker whose record cannot be sent at all (gone, damaged,
refused by the server) is dropped, as the local file stays.

A file home has no outbox: its cost here is one failed `scandir`."""

from __future__ import annotations

import json
import os

from loopctl.storage import team_outbox as outbox
from loopctl.storage.paths import Paths

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

    from loopctl.storage.store import Store

SEND_AT_MOST = 500  # markers one sender sends; the next sends the rest


def publish_pending(store: Store) -> int:
    """Send what the outbox lists; how many were sent. Never raises."""
    names = outbox.pending(store.paths, SEND_AT_MOST)
    if not names:
        return 0
    try:
        return _send_all(store, names)
    except Exception:  # noqa: BLE001 -- best effort: the next sender tries again
        return 0


def _send_all(store: Store, names: list[str]) -> int:
    from loopctl.storage.pg.connect import driver
    from loopctl.storage.pg.dsn import chosen
    from loopctl.storage.pg.team import TeamStore

    dsn = chosen(store.read_defs().top.get("store"), str(store.paths.loops_file))
    if dsn is None:  # the store was unset: nothing is owed to a team any more
        for name in names:
            outbox.done(store.paths, name)
        return 0
    team = TeamStore(dsn)
    conn, own = _connection(store, team)
    sent = 0
    try:
        for name in sorted(names):
            try:
                sent += _send(conn, store.paths, name, team.machine)
            except driver().OperationalError:
                raise  # the link is gone: leave the rest for the next sender
            except (driver().Error, ValueError):
                outbox.done(store.paths, name)  # this one can never be sent
    finally:
        if own:
            conn.close()
    return sent


def _connection(store: Store, team: Any) -> tuple[Any, bool]:
    """The process's connection (the state's, kept from the gate) when it
    is not inside a store lock's transaction (a record that fails to insert
    must not abort the state's); else one of its own, closed after. True:
    ours to close."""
    shared = store.shared()
    if shared is not None and not shared.in_tx and shared.dsn == team.dsn:
        return shared._connection(), False
    return team.open_checked(), True


def _send(conn: Any, paths: Paths, name: str, here: str) -> int:
    parsed = outbox.parse(name)
    if parsed is None:
        outbox.done(paths, name)
        return 0
    kind, loop, key = parsed
    if kind == "skip":
        return _send_skip(conn, paths, name, loop, key)
    return _send_run(conn, paths, name, loop, key, here)


def _send_skip(conn: Any, paths: Paths, name: str, loop: str, key: str) -> int:
    from loopctl.storage.pg.runs import publish_skip

    found = outbox.read_skip(paths, name)
    if found is not None:
        machine, entry = found
        publish_skip(conn, f"{machine}/{key}", loop, machine, entry)
    outbox.done(paths, name)
    return int(found is not None)


def _send_run(conn: Any, paths: Paths, name: str, loop: str, run_id: str, here: str) -> int:
    from loopctl.storage.pg.runs import publish_run

    found = _read_record(paths, loop, run_id)
    if found is None:  # pruned, or damaged: nothing the team can be shown
        outbox.done(paths, name)
        return 0
    record, machine, inode = found
    log: str | None = str(paths.run_log(loop, run_id))
    tail, cut = _tail(str(log))
    # Where the log ends (a follower on another machine aligns the tail with it).
    size = len(tail) if tail is not None and not cut else _size(str(log))
    if machine != here:  # a run of another machine this one recorded lost: its log is there
        log, tail, cut, size = None, None, False, None
    publish_run(conn, loop, machine, run_id, record, log, tail, cut,
                size if tail is not None else None)
    outbox.done(paths, name)
    # Replaced while it was being sent (a `lost` record by the supervisor's
    # own): the writer's marker may have gone with ours; mark it again.
    if _inode(paths.run_record(loop, run_id)) not in (inode, None):
        outbox.note_record(paths, loop, run_id)
    return 1


def _read_record(paths: Paths, loop: str, run_id: str) -> tuple[str, str, int] | None:
    """(the record as JSON text, its machine, the file's inode)."""
    from loopctl.domain.untrusted import text
    from loopctl.storage.paths import read_bounded, refuse_constant

    path = paths.run_record(loop, run_id)
    inode = _inode(path)
    data = read_bounded(path, outbox.MAX_RECORD_BYTES)
    if data is None or inode is None:
        return None
    try:
        record = json.loads(data, parse_constant=refuse_constant)
    except (ValueError, RecursionError):
        return None
    machine = text(record.get("machine"), 100) if isinstance(record, dict) else None
    if not machine:
        return None
    return json.dumps(record, allow_nan=False), machine, inode


def _tail(path: str) -> tuple[bytes | None, bool]:
    """The log's last 64 KiB, never through a link (storage/safe_open)."""
    from loopctl.storage.pg.runs import TAIL_BYTES
    from loopctl.storage.safe_open import Refused, read_tail

    try:
        found = read_tail(path, TAIL_BYTES)
    except (Refused, OSError):
        return None, False
    return found if found is not None else (None, False)


def _size(path: str) -> int | None:
    try:
        return os.lstat(path).st_size
    except OSError:
        return None


def _inode(path: os.PathLike[str]) -> int | None:
    try:
        return os.lstat(path).st_ino
    except OSError:
        return None
