"""Run records and logs on disk: `runs/<loop>/<run-id>.{log,json}`.

Records are read back as untrusted input: a damaged or planted file must not
break `history` or `logs`, so each is bounded, never read through a symlink,
and cleaned field by field (`clean_record`).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from loopctl.domain import untrusted
from loopctl.storage.paths import Paths, is_run_id
from loopctl.storage.paths import read_bounded as paths_read_bounded

MAX_RECORD_BYTES = 1024 * 1024
RECORD_TEXT = ("loop", "trigger", "due_at", "started_at", "ended_at", "observed_at",
               "outcome", "session_id", "result", "log", "note", "status_after",
               "handoff", "branch", "base", "base_ref", "head", "pr_url", "handoff_error",
               "needs_review", "handoff_note")
RECORD_NUMBERS = ("iteration", "duration_s", "exit_code", "missed", "cost_usd",
                  "next_delay_s", "commits", "files_changed", "insertions", "deletions")

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


def _left_out(value: Any) -> list[dict[str, Any]] | None:
    """The hand-off's files over --max-file-size: {"path", "bytes"} each."""
    if not isinstance(value, list):
        return None
    return [{"path": untrusted.text(item.get("path"), 4000),
             "bytes": untrusted.number(item.get("bytes"), 0, 1e15)}
            for item in value[:1000] if isinstance(item, dict)]


def clean_record(data: Any, run_id: str) -> dict[str, Any]:
    """A record as `history` can show it: known fields of the right type;
    what was not is named in `damaged`."""
    raw = data if isinstance(data, dict) else {}
    damaged = [] if isinstance(data, dict) else ["the record itself"]
    out: dict[str, Any] = {"version": 1, "run_id": run_id}
    for key in RECORD_TEXT:
        out[key] = untrusted.text(raw.get(key), 4000)
    for key in RECORD_NUMBERS:
        out[key] = untrusted.number(raw.get(key), -1e15, 1e15)
        if out[key] is not None and float(out[key]).is_integer() and key != "duration_s":
            out[key] = int(out[key])
    decision = raw.get("decision")
    out["decision"] = {k: untrusted.text(decision.get(k), 4000)
                       for k in ("decision", "summary", "evidence")} \
        if isinstance(decision, dict) else None
    out["merged"] = raw.get("merged") if isinstance(raw.get("merged"), bool) else None
    out["left_out"] = _left_out(raw.get("left_out"))
    argv = raw.get("argv")
    out["argv"] = argv if isinstance(argv, list) and all(isinstance(a, str) for a in argv) \
        else None
    damaged += [k for k in (*RECORD_TEXT, *RECORD_NUMBERS, "decision", "argv")
                if raw.get(k) is not None and out[k] is None]
    if raw.get("run_id") != run_id:
        damaged.append("run_id")
    if out["outcome"] not in untrusted.OUTCOMES:
        out["outcome"] = "unknown"
        damaged.append("outcome")
    if damaged:
        out["damaged"] = damaged
    return out


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
