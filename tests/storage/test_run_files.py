"""Run records and logs on disk read back as untrusted input (DESIGN §5,
§11): only regular files are read (never a FIFO a reader would hang on, nor
a directory), a loop without a run folder has no runs, and pruning keeps
the newest runs and any run in flight."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from loopctl.storage import paths as paths_mod
from loopctl.storage import runs

OLD, MID, NEW = "20261130T031500Z-0001", "20261130T041500Z-0002", "20261130T051500Z-0003"


def folder_for(loop: str) -> tuple[paths_mod.Paths, Path]:
    paths = paths_mod.resolve()
    folder = paths.loop_runs_dir(loop)
    folder.mkdir(parents=True)
    return paths, folder


def write_run(folder: Path, run_id: str, outcome: str = "ok") -> None:
    (folder / f"{run_id}.json").write_text(json.dumps(
        {"version": 1, "run_id": run_id, "loop": "job", "outcome": outcome}))
    (folder / f"{run_id}.log").write_text("output\n")


def test_a_fifo_in_place_of_a_record_is_not_read(home: Path) -> None:
    paths, folder = folder_for("job")
    os.mkfifo(folder / f"{NEW}.json")
    # Opened for reading without O_NONBLOCK, a FIFO blocks until someone
    # opens it for writing: after 5 s a thread keeps doing so, so that the
    # test fails (on the time taken) instead of hanging.
    done = threading.Event()
    threading.Thread(target=unblock, args=(folder / f"{NEW}.json", done), daemon=True).start()
    started = time.monotonic()
    try:
        assert runs.read_record(paths, "job", NEW) is None
        assert runs.list_records(paths, "job") == []
    finally:
        done.set()
    assert time.monotonic() - started < 4


def unblock(fifo: Path, done: threading.Event) -> None:
    if done.wait(5):
        return
    while not done.is_set():
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass  # no reader waiting right now
        time.sleep(0.01)


def test_a_directory_in_place_of_a_record_is_not_read(home: Path) -> None:
    paths, folder = folder_for("job")
    (folder / f"{NEW}.json").mkdir()
    write_run(folder, OLD)
    assert runs.read_bounded(folder / f"{NEW}.json") is None
    assert [r.run_id for r in runs.list_records(paths, "job")] == [OLD]


def test_a_record_larger_than_the_bound_is_not_read(home: Path) -> None:
    paths, folder = folder_for("job")
    (folder / f"{NEW}.json").write_bytes(b" " * (runs.MAX_RECORD_BYTES + 1))
    assert runs.read_record(paths, "job", NEW) is None


def test_a_loop_without_a_run_folder_has_no_runs_and_nothing_to_prune(home: Path) -> None:
    paths = paths_mod.resolve()
    assert runs.read_record(paths, "ghost", NEW) is None
    assert runs.run_ids(paths, "ghost") == []
    assert runs.latest_run_id(paths, "ghost") is None
    assert runs.prune(paths, "ghost", 1, set()) == []


def test_a_symlinked_run_folder_is_not_followed(home: Path, tmp_path: Path) -> None:
    paths = paths_mod.resolve()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    write_run(elsewhere, OLD)
    paths.loop_runs_dir("job").parent.mkdir(parents=True)
    paths.loop_runs_dir("job").symlink_to(elsewhere)
    assert runs.read_record(paths, "job", OLD) is None
    assert runs.prune(paths, "job", 0, set()) == []
    assert (elsewhere / f"{OLD}.json").exists()


def test_prune_keeps_the_newest_and_the_run_in_flight(home: Path) -> None:
    paths, folder = folder_for("job")
    for run_id in (OLD, MID, NEW):
        write_run(folder, run_id)
    (folder / f"{OLD}.prompt").write_text("p")
    assert runs.prune(paths, "job", 1, {OLD}) == [MID]
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [f"{OLD}.json", f"{OLD}.log", f"{OLD}.prompt", f"{NEW}.json", f"{NEW}.log"])
    assert runs.latest_run_id(paths, "job") == NEW


def test_runs_are_ordered_by_their_sequence_not_their_clock(home: Path) -> None:
    paths, folder = folder_for("job")
    # The wall clock went back between the claims of run 2 and run 3.
    later_clock, earlier_clock = "20261130T051500Z-0002", "20261130T031500Z-0003"
    write_run(folder, later_clock)
    write_run(folder, earlier_clock)
    (folder / "notes.txt").write_text("not a run")
    assert runs.run_ids(paths, "job") == [later_clock, earlier_clock]
    assert runs.run_order("odd-name") == (-1, "odd-name")
