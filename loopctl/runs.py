"""Run records and logs on disk: `runs/<loop>/<run-id>.{log,json}`."""

from __future__ import annotations

import json
from typing import Any

from loopctl.paths import Paths

EXIT_FOR_OUTCOME = {"ok": 0, "failed": 1, "timeout": 124, "killed": 130,
                    "lost": 1, "deferred": 75}


def run_order(run_id: str) -> tuple[int, str]:
    """Runs in the order they were claimed: by the per-loop sequence number
    that ends the id, not its timestamp (the wall clock can go back)."""
    _, _, seq = run_id.rpartition("-")
    return (int(seq) if seq.isdigit() else -1, run_id)


def list_records(paths: Paths, loop: str) -> list[dict[str, Any]]:
    """Finished runs of `loop`, oldest first."""
    folder = paths.loop_runs_dir(loop)
    records = []
    for path in sorted(folder.glob("*.json"), key=lambda p: run_order(p.name.split(".")[0])):
        if path.name.endswith(".decision.json"):
            continue
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return records


def read_record(paths: Paths, loop: str, run_id: str) -> dict[str, Any] | None:
    try:
        data = json.loads(paths.run_record(loop, run_id).read_text())
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def run_ids(paths: Paths, loop: str) -> list[str]:
    folder = paths.loop_runs_dir(loop)
    if not folder.is_dir():
        return []
    return sorted({p.name.split(".", 1)[0] for p in folder.iterdir()
                   if not p.name.startswith(".")}, key=run_order)


def prune(paths: Paths, loop: str, keep: int, in_flight: set[str]) -> list[str]:
    """Delete the files of the oldest runs beyond `keep`; never one in flight."""
    ids = [r for r in run_ids(paths, loop) if r not in in_flight]
    doomed = ids[: max(len(ids) - keep, 0)]
    folder = paths.loop_runs_dir(loop)
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
