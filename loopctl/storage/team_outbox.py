"""What this machine still owes the team store (DESIGN §21): one small file
per run record or skipped slot not yet sent, in `team-outbox/` beside the
state. The local files stay the source of truth on this machine; the outbox
only says which of them the team has not seen. Each marker is left under
the store lock, in the write that records the run, so a store that is down
then (or a supervisor killed just after) loses nothing: the next sender
(engine/team_publish.py: the supervisor after it settles, and every driver
pass) sends what is listed, and only then removes the marker.

- `run~LOOP~RUN_ID`: empty; the record is read from its file when sent, so
  a `lost` record the supervisor later replaced is sent as it now is.
- `skip~LOOP~ID.json`: the skipped slot itself (skipped.jsonl keeps only
  the newest 200 per loop, so the entry travels in the marker).

A home without a store never writes here: a record is marked only when it
names a machine (only a team store's claim gives it one), a skip only when
the home has a store.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from loopctl.domain.names import is_loop_name, is_run_id
from loopctl.storage.paths import Paths, read_bounded

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from loopctl.domain.skipped import SkippedSlot

FOLDER = "team-outbox"
MAX_PENDING = 10_000  # a machine cut off for months stops marking, not the disk
MAX_SKIP_BYTES = 4096
MAX_RECORD_BYTES = 1024 * 1024  # storage/runs.MAX_RECORD_BYTES


def folder(paths: Paths) -> Path:
    return paths.state_dir / FOLDER


def run_marker(paths: Paths, loop: str, run_id: str) -> Path:
    return folder(paths) / f"run~{loop}~{run_id}"


def note_record(paths: Paths, loop: str, run_id: str) -> None:
    """Mark a record just written for the store, if a team store's claim
    gave it a machine. Cheap for a home of files: one read of the record."""
    data = read_bounded(paths.run_record(loop, run_id), MAX_RECORD_BYTES)
    if not data or b'"machine"' not in data:
        return
    try:
        machine = json.loads(data).get("machine")
    except (ValueError, AttributeError, RecursionError):
        return
    if isinstance(machine, str) and machine:
        _write(run_marker(paths, loop, run_id), b"")


def note_skips(paths: Paths, entries: list[tuple[str, SkippedSlot]]
               ) -> list[tuple[str, SkippedSlot]]:
    """Mark skipped slots for the store, in a home that has one; the
    entries, each naming its machine there (in the local file too:
    `history` shows it)."""
    machine = _team_machine(paths) if entries else None
    if machine is None:
        return entries
    from loopctl.fast.data_class import replace

    named = [(loop, entry if entry.machine else replace(entry, machine=machine))
             for loop, entry in entries]
    for loop, entry in named:
        body = json.dumps({"machine": entry.machine, "entry": entry.to_json()})
        if is_loop_name(loop) and len(body) <= MAX_SKIP_BYTES:
            _write(folder(paths) / f"skip~{loop}~{os.urandom(12).hex()}.json", body.encode())
    return named


def pending(paths: Paths, at_most: int) -> list[str]:
    """The markers' names (at most `at_most`); [] when there is no outbox."""
    return _listed(folder(paths), at_most)


def _listed(directory: Path, at_most: int) -> list[str]:
    try:
        with os.scandir(directory) as found:
            names = []
            for item in found:
                names.append(item.name)
                if len(names) >= at_most:
                    break
            return names
    except OSError:
        return []


def parse(name: str) -> tuple[str, str, str] | None:
    """(kind, loop, run id or skip id) of a marker's name; None: not one."""
    kind, _, rest = name.partition("~")
    loop, _, key = rest.partition("~")
    if not is_loop_name(loop):
        return None
    if kind == "run" and is_run_id(key):
        return kind, loop, key
    if kind == "skip" and key.endswith(".json") and len(key) == 29 \
            and all(c in "0123456789abcdef" for c in key[:-5]):
        return kind, loop, key[:-5]
    return None


def read_skip(paths: Paths, name: str) -> tuple[str, str] | None:
    """(machine, entry as JSON text) of a skip marker; None when damaged
    or when its entry is no skipped slot loopctl writes (SkippedSlot)."""
    from loopctl.domain.skipped import SkippedSlot

    data = read_bounded(folder(paths) / name, MAX_SKIP_BYTES)
    try:
        body = json.loads(data) if data else {}
        machine, entry = body["machine"], SkippedSlot.from_json(body["entry"])
    except (ValueError, TypeError, KeyError, RecursionError):
        return None
    if not isinstance(machine, str) or not machine or entry is None:
        return None
    return machine, json.dumps(entry.to_json(), allow_nan=False)


def done(paths: Paths, name: str) -> None:
    try:
        os.unlink(folder(paths) / name)
    except OSError:
        pass  # another sender removed it first


def _write(path: Path, data: bytes) -> None:
    """Best effort: a marker must never fail the write that records a run."""
    from loopctl.storage.atomic import atomic_write

    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        if not path.exists() and len(_listed(path.parent, MAX_PENDING)) >= MAX_PENDING:
            return
        atomic_write(path, data, durable=False)
    except Exception:  # noqa: BLE001 -- the local record is written; that is what counts
        pass


def _team_machine(paths: Paths) -> str | None:
    """This machine's name when the home has a store, else None (cheap for
    a home of files: a glance at loops.yaml's bytes)."""
    from loopctl.storage.pg.gate import ENV_STORE, may_have_store

    try:
        if not os.environ.get(ENV_STORE, "").strip():
            if not may_have_store(str(paths.loops_file)):
                return None
            from loopctl.storage.store import Store

            if Store(paths).read_defs().top.get("store") is None:
                return None
        from loopctl.storage.pg.dsn import machine

        return machine()
    except Exception:  # noqa: BLE001 -- best effort, as the skip record itself
        return None
