"""Run records and logs on disk: `runs/<loop>/<run-id>.{log,json}`.

Records are read back as untrusted input: a damaged or planted file must not
break `history` or `logs`, so each is bounded, never read through a symlink,
and cleaned field by field (`RunRecord.from_json`, domain/run_record.py). Which
runs exist is what loopctl itself wrote down (`run-index/<loop>.json`,
updated under the store lock whenever a record is written), never what a
listing of the folder shows: a file planted there with a run id's name is
neither shown nor decides what `--keep-runs` deletes (DESIGN §14).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from loopctl.domain.errors import LoopctlError
from loopctl.domain.names import is_run_id
from loopctl.domain.run_record import RunRecord
from loopctl.storage.paths import FILE_MODE, Paths
from loopctl.storage.paths import read_bounded as paths_read_bounded

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

    from loopctl.domain.skipped import SkippedSlot
    from loopctl.domain.state import LoopState

MAX_RECORD_BYTES = 1024 * 1024
MAX_INDEX_BYTES = 4 * 1024 * 1024  # ~150,000 run ids; pruning keeps it far smaller
RUN_FILES = (".log", ".json", ".prompt", ".unsaved", ".fault", ".trigger", ".answer")


def run_order(run_id: str) -> tuple[int, str]:
    """Runs in the order they were claimed: by the per-loop sequence number
    that ends the id, not its timestamp (the wall clock can go back)."""
    _, _, seq = run_id.rpartition("-")
    return (int(seq) if seq.isascii() and seq.isdigit() else -1, run_id)


def loop_folder(paths: Paths, loop: str) -> Path | None:
    """The loop's run folder if it is a real directory (never a symlink)."""
    folder = paths.loop_runs_dir(loop)
    try:
        mode = os.lstat(folder).st_mode
    except OSError:
        return None
    return folder if stat.S_ISDIR(mode) else None


def open_log(path: Path) -> int:
    """The run's log for appending; a symlink planted in its place is refused."""
    try:
        # Read too: the footer checks whether the agent's last line ended.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK,
                     FILE_MODE)
    except OSError as exc:
        raise LoopctlError(f"cannot open the run log {path}: {exc.strerror}") from None
    seen = os.fstat(fd)
    # A FIFO, a device or a second name of another file (a hard link to
    # state.json) planted there is not loopctl's log.
    if not stat.S_ISREG(seen.st_mode) or seen.st_nlink != 1:
        os.close(fd)
        raise LoopctlError(f"cannot open the run log {path}: not a file loopctl made")
    os.set_blocking(fd, True)
    return fd


def append_to_log(path: str | Path, data: bytes) -> bool:
    """Append loopctl's lines (hook and notification results) to an existing
    run log. Never through a symlink, never into a FIFO or device (opened
    non-blocking, checked by fstat), never into a file with a second name
    (a hard link to state.json): False then, and nothing is written."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return False
    try:
        seen = os.fstat(fd)
        if not stat.S_ISREG(seen.st_mode) or seen.st_nlink != 1:
            return False
        os.write(fd, data)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def read_bounded(path: Path, limit: int = MAX_RECORD_BYTES) -> bytes | None:
    return paths_read_bounded(path, limit)


def load_record(path: Path, run_id: str) -> RunRecord | None:
    data = read_bounded(path)
    if data is None:
        return None
    try:
        return RunRecord.from_json(json.loads(data), run_id)
    except (ValueError, RecursionError):
        return RunRecord.from_json(None, run_id)


def list_records(paths: Paths, loop: str) -> list[RunRecord]:
    """Finished runs of `loop`, oldest first."""
    folder = loop_folder(paths, loop)
    if folder is None:
        return []
    records = []
    for run_id in run_ids(paths, loop):
        record = load_record(folder / f"{run_id}.json", run_id)
        if record is not None:
            records.append(record)
    return records


def count_run(paths: Paths, loop: str, st: LoopState, record: RunRecord) -> None:
    """Add a finished run to the loop's `tally` (domain.tally), which the
    caller writes in the state write that settles the run. An entry without
    one (state.json from before it) starts from the records kept, this
    run's own excepted (a retried save may have written it already)."""
    from loopctl.domain import tally

    base = st.tally
    if base is None:
        base = tally.seeded(r for r in list_records(paths, loop)
                            if r.run_id != record.run_id)
    st.tally = tally.add(base, record)


def read_record(paths: Paths, loop: str, run_id: str) -> RunRecord | None:
    """One record, cleaned; None when there is none."""
    if loop_folder(paths, loop) is None:
        return None
    return load_record(paths.run_record(loop, run_id), run_id)


def run_ids(paths: Paths, loop: str) -> list[str]:
    """The runs loopctl recorded for `loop`, in claim order."""
    index = paths.run_index(loop)
    if not os.path.lexists(index):
        return _legacy_ids(paths, loop)
    data = read_bounded(index, MAX_INDEX_BYTES)
    if data is None:
        return []
    try:
        listed = json.loads(data).get("runs")
    except (ValueError, AttributeError, RecursionError):
        return []
    if not isinstance(listed, list):
        return []
    return sorted({r for r in listed if is_run_id(r)}, key=run_order)


def _write_index(paths: Paths, loop: str, ids: list[str],
                 skipped: set[str] | None = None) -> None:
    from loopctl.storage.atomic import atomic_write, strict_json
    from loopctl.storage.paths import ensure_dir

    path = paths.run_index(loop)
    ensure_dir(path.parent)
    index: dict[str, Any] = {"version": 1, "runs": ids}
    if skipped:  # fires a gate skipped: what --keep-runs deletes first
        index["skipped"] = [r for r in ids if r in skipped]
    atomic_write(path, (strict_json(index) + "\n").encode())


def skipped_ids(paths: Paths, loop: str) -> set[str]:
    """The recorded runs whose gate found nothing to do (DESIGN §17)."""
    data = read_bounded(paths.run_index(loop), MAX_INDEX_BYTES)
    try:
        listed = json.loads(data).get("skipped") if data else None
    except (ValueError, AttributeError, RecursionError):
        return set()
    return {r for r in listed if is_run_id(r)} if isinstance(listed, list) else set()


def _legacy_ids(paths: Paths, loop: str) -> list[str]:
    """A home from before the index: its records, as the listing shows them
    (taken once; from then on the index is written with every record)."""
    folder = loop_folder(paths, loop)
    if folder is None:
        return []
    return sorted({p.name[:-5] for p in folder.iterdir()
                   if p.name.endswith(".json") and is_run_id(p.name[:-5])}, key=run_order)


def start_index(paths: Paths, loop: str, legacy: bool) -> None:
    """Make the loop's index if it has none. Called when its run folder is
    made (`legacy` False: nothing can have been planted yet) or found
    without an index (a home from before the index: its records are taken
    once, as the listing shows them)."""
    if os.path.lexists(paths.run_index(loop)):
        return
    _write_index(paths, loop, _legacy_ids(paths, loop) if legacy else [])


def remember(paths: Paths, loop: str, run_id: str, skipped: bool = False) -> None:
    """Add a run whose record loopctl just wrote (under the store lock)."""
    ids = run_ids(paths, loop)
    if run_id not in ids:
        marked = skipped_ids(paths, loop) | ({run_id} if skipped else set())
        _write_index(paths, loop, sorted([*ids, run_id], key=run_order), marked)
    from loopctl.storage import run_digest

    run_digest.add(paths, loop, run_id)
    from loopctl.storage.team_outbox import note_record

    note_record(paths, loop, run_id)  # a team store's record: the team is owed it


def is_known(paths: Paths, loop: str, run_id: str) -> bool:
    return run_id in run_ids(paths, loop)


def prune(paths: Paths, loop: str, keep: int, in_flight: set[str]) -> list[str]:
    """Delete the files of the oldest recorded runs beyond `keep`; never one
    in flight, never a file loopctl did not name itself. Under the store lock."""
    ids = run_ids(paths, loop)
    finished = [r for r in ids if r not in in_flight]
    excess = max(len(finished) - keep, 0)
    skipped = skipped_ids(paths, loop)
    # Skipped fires go first, oldest first: a loop gated every minute keeps
    # its real runs (DESIGN §17).
    first = [r for r in finished if r in skipped]
    doomed = set((first + [r for r in finished if r not in skipped])[:excess])
    folder = loop_folder(paths, loop)
    if folder is None or not doomed:
        return []
    for run_id in doomed:
        for suffix in RUN_FILES:
            try:
                (folder / f"{run_id}{suffix}").unlink()
            except OSError:
                pass
    try:
        _write_index(paths, loop, [r for r in ids if r not in doomed], skipped - doomed)
    except LoopctlError:
        pass  # a full disk: the index names runs whose files are gone, which readers skip
    return sorted(doomed, key=run_order)


def latest_run_id(paths: Paths, loop: str, current: str | None = None) -> str | None:
    """The newest recorded run, or `current` (the run in flight) if newer."""
    ids = run_ids(paths, loop) + ([current] if isinstance(current, str) and is_run_id(current)
                                  else [])
    return max(ids, key=run_order) if ids else None


# -- slots that did not run (DESIGN §20): runs/<loop>/skipped.jsonl -------------------

MAX_SKIPS = 200  # records kept per loop, newest last
MAX_SKIPS_BYTES = 256 * 1024


def skips_file(paths: Paths, loop: str) -> Path:
    return paths.loop_runs_dir(loop) / "skipped.jsonl"


def append_skips(paths: Paths, entries: list[tuple[str, SkippedSlot]]) -> None:
    """Add each loop's skipped-slot records (under the store lock), keeping
    the newest MAX_SKIPS. Best effort: a skip record must never stop a
    pass that fires other loops."""
    from loopctl.storage.atomic import atomic_write
    from loopctl.storage.team_outbox import note_skips

    # In a home with a team store, the team's too (each then names its machine).
    entries = note_skips(paths, entries)
    by_loop: dict[str, list[SkippedSlot]] = {}
    for loop, entry in entries:
        by_loop.setdefault(loop, []).append(entry)
    for loop, new in by_loop.items():
        try:
            kept = read_skips(paths, loop) + new
            data = "".join(json.dumps(e.to_json()) + "\n" for e in kept[-MAX_SKIPS:]).encode()
            paths.loop_runs_dir(loop).mkdir(parents=True, exist_ok=True)
            atomic_write(skips_file(paths, loop), data, durable=False)
        except (OSError, LoopctlError):
            continue


def read_skips(paths: Paths, loop: str) -> list[SkippedSlot]:
    """The loop's skipped-slot records, oldest first; a damaged or planted
    line is left out (SkippedSlot.from_json)."""
    from loopctl.domain.skipped import SkippedSlot

    data = read_bounded(skips_file(paths, loop), MAX_SKIPS_BYTES)
    if not data:
        return []
    out = []
    for line in data.decode("utf-8", "replace").splitlines()[-2 * MAX_SKIPS:]:
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue
        found = SkippedSlot.from_json(entry)
        if found is not None:
            out.append(found)
    return out[-MAX_SKIPS:]
