"""A run's `.fault` (storage/run_files, issue 49 item 4): reserved before
the run with its bytes written, rewritten in place with why the supervisor
could not write (no new block: its size never changes), read back by the
next pass in one line; an error that is not the disk's says nothing."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from loopctl.domain.errors import LoopctlError
from loopctl.storage import paths as paths_mod
from loopctl.storage import run_files

RUN = "20261130T031500Z-0001"
ENOSPC_TEXT = os.strerror(errno.ENOSPC)


def fault_of(home: Path) -> tuple[paths_mod.Paths, Path]:
    paths = paths_mod.resolve()
    paths.loop_runs_dir("job").mkdir(parents=True)
    return paths, paths.run_file("job", RUN, ".fault")


def test_the_reason_is_written_in_the_reserved_bytes_and_read_back(home: Path) -> None:
    paths, fault = fault_of(home)
    run_files.reserve_fault(paths, "job", RUN)
    assert fault.stat().st_size == run_files.FAULT_BYTES
    assert run_files.unsaved_reason(paths, "job", RUN) is None  # blank: nothing to say
    assert not fault.exists(), "a blank .fault is removed once read"
    run_files.reserve_fault(paths, "job", RUN)
    reserved = fault.stat().st_ino
    why = run_files.disk_fault(LoopctlError(f"cannot write /x/state.json: {ENOSPC_TEXT}; "
                                            "the previous file is unchanged"))
    assert why is not None and why.endswith("(ENOSPC)")
    run_files.mark_unsaved(paths, "job", RUN, why + "\n\x1b[31m")
    assert (fault.stat().st_ino, fault.stat().st_size) == (reserved, run_files.FAULT_BYTES)
    assert not paths.unsaved_marker("job", RUN).exists()
    said = run_files.unsaved_reason(paths, "job", RUN)
    assert said is not None and said.startswith("cannot write /x/state.json") \
        and "\n" not in said and "\x1b" not in said, said
    run_files.drop_fault(paths, "job", RUN)
    assert not fault.exists()


def test_without_a_reservation_the_old_unsaved_marker_is_left(home: Path) -> None:
    paths, fault = fault_of(home)
    run_files.mark_unsaved(paths, "job", RUN, "")
    assert not fault.exists() and paths.unsaved_marker("job", RUN).exists()
    assert run_files.unsaved_reason(paths, "job", RUN) == "state could not be saved"


def test_only_errors_of_the_disk_are_named() -> None:
    assert run_files.disk_fault(OSError(errno.EROFS, os.strerror(errno.EROFS))) == \
        f"cannot write: {os.strerror(errno.EROFS)} (EROFS)"
    assert run_files.disk_fault(OSError(errno.ENOENT, "gone")) is None
    assert run_files.disk_fault(LoopctlError("loop 'x' has no run in flight")) is None
    assert run_files.disk_fault(ValueError(ENOSPC_TEXT)) is None
