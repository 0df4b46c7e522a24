"""The files a run leaves beside its record (loopctl/storage/run_files.py):
the prompt copy is private and never written through a planted symlink, the
unsaved marker is best effort, the decision folder goes whatever the agent
left in it, and the `loopctl` shim is rewritten only when its text changed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from loopctl.storage import paths as paths_mod
from loopctl.storage import run_files

RUN = "20261130T031500Z-0001"


@pytest.fixture
def paths(home: Path) -> paths_mod.Paths:
    found = paths_mod.resolve()
    found.loop_runs_dir("job").mkdir(parents=True)
    return found


def test_the_prompt_copy_is_private_and_replaced(paths: paths_mod.Paths) -> None:
    path = run_files.write_prompt(paths, "job", RUN, "first, longer text")
    assert run_files.write_prompt(paths, "job", RUN, "second") == path
    assert path.read_text() == "second"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_prompt_is_never_written_through_a_symlink(paths: paths_mod.Paths,
                                                       tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("theirs")
    paths.run_file("job", RUN, ".prompt").symlink_to(target)
    with pytest.raises(OSError):
        run_files.write_prompt(paths, "job", RUN, "text")
    assert target.read_text() == "theirs"


def test_the_unsaved_marker_is_left_and_never_raises(paths: paths_mod.Paths) -> None:
    run_files.mark_unsaved(paths, "job", RUN, "disk full")
    assert paths.unsaved_marker("job", RUN).read_text() == "disk full"
    run_files.mark_unsaved(paths, "gone", RUN, "no folder")  # swallowed
    assert not paths.unsaved_marker("gone", RUN).exists()


def test_the_decision_folder_goes_with_what_the_agent_left(paths: paths_mod.Paths,
                                                           tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    for filled in (False, True):
        folder = paths_mod.ensure_dir(paths.decision_dir("job", RUN))
        if filled:
            (folder / "decision.json").write_text("{}")
            (folder / "link").symlink_to(outside)
        run_files.remove_decision_dir(folder)
        assert not folder.exists()
    run_files.remove_decision_dir(folder)  # already gone
    assert (outside / "keep").exists()


def test_the_shim_is_rewritten_only_when_it_changed(paths: paths_mod.Paths) -> None:
    folder = run_files.install_shim(paths, "#!/bin/sh\necho one\n")
    shim = folder / "loopctl"
    assert stat.S_IMODE(shim.stat().st_mode) == 0o700
    before = shim.stat().st_ino
    assert run_files.install_shim(paths, "#!/bin/sh\necho one\n") == folder
    assert shim.stat().st_ino == before  # the same file: not written again
    run_files.install_shim(paths, "#!/bin/sh\necho two\n")
    assert shim.read_text() == "#!/bin/sh\necho two\n" and os.access(shim, os.X_OK)
