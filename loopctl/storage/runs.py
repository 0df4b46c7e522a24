"""Run records and logs on disk: `runs/<loop>/<run-id>.{log,json}`.

Records are read back as untrusted input: a damaged or planted file must not
break `history` or `logs`, so each is bounded, never read through a symlink,
and cleaned field by field (`loopctl.domain.records.clean_record`).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from loopctl.domain.names import is_run_id
from loopctl.domain.records import clean_record
from loopctl.storage.paths import Paths
from loopctl.storage.paths import read_bounded as paths_read_bounded

MAX_RECORD_BYTES = 1024 * 1024
EXIT_FOR_OUTCOME = {"ok": 0, "failed": 1, "timeout": 124, "killed": 130,
                    "lost": 1, "deferred": 75}


def run_order(run_id: str) -> tuple[int, str]:
    """Runs in the order they were claimed: by the per-loop sequence number
    that ends the id, not its timestamp (the wall clock can go back)."""
    _, _, seq = run_id.rpartition("-")
    return (int(seq) if seq.isdigit() else -1, run_id)


def loop_folder(paths: Paths, loop: str) -> Path | None:
    """The loop's run folder if it is a real directory (never a symlink)."""
    folder = paths.loop_runs_dir(loop)
    try:
        mode = os.lstat(folder).st_mode
    except OSError:
        return None
    return folder if stat.S_ISDIR(mode) else None


def read_bounded(path: Path, limit: int = MAX_RECORD_BYTES) -> bytes | None:
    return paths_read_bounded(path, limit)


def load_record(path: Path, run_id: str) -> dict[str, Any] | None:
    data = read_bounded(path)
    if data is None:
        return None
    try:
        return clean_record(json.loads(data), run_id)
    except (ValueError, RecursionError):
        return clean_record(None, run_id)


def list_records(paths: Paths, loop: str) -> list[dict[str, Any]]:
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


def read_record(paths: Paths, loop: str, run_id: str) -> dict[str, Any] | None:
    """One record, cleaned; None when there is none."""
    if loop_folder(paths, loop) is None:
        return None
    return load_record(paths.run_record(loop, run_id), run_id)


def run_ids(paths: Paths, loop: str) -> list[str]:
    folder = loop_folder(paths, loop)
    if folder is None:
        return []
    return sorted({run_id for p in folder.iterdir()
                   if is_run_id(run_id := p.name.split(".", 1)[0])}, key=run_order)


def prune(paths: Paths, loop: str, keep: int, in_flight: set[str]) -> list[str]:
    """Delete the files of the oldest runs beyond `keep`; never one in flight."""
    ids = [r for r in run_ids(paths, loop) if r not in in_flight]
    doomed = ids[: max(len(ids) - keep, 0)]
    folder = loop_folder(paths, loop)
    if folder is None:
        return []
    for run_id in doomed:
        for path in folder.glob(f"{run_id}.*"):
            try:
                path.unlink()
            except OSError:
                pass
    return doomed


def latest_run_id(paths: Paths, loop: str) -> str | None:
    ids = run_ids(paths, loop)
    return ids[-1] if ids else None
