"""The files a run leaves beside its record and log, written here so that
only storage writes loopctl's files (DESIGN §10): the prompt the agent reads,
the marker that says a run's state could not be saved, the decision folder
the agent may write, and the `loopctl` shim on the agent's PATH."""

from __future__ import annotations

import os
from pathlib import Path

from loopctl.storage.paths import FILE_MODE, Paths, ensure_dir


def write_prompt(paths: Paths, loop: str, run_id: str, text: str) -> Path:
    """loopctl's copy of the text sent to the agent (`{prompt_file}`): the
    agent reads the copy, never the user's path."""
    path = paths.run_file(loop, run_id, ".prompt")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    return path


def mark_unsaved(paths: Paths, loop: str, run_id: str, message: str) -> None:
    """Leave a marker the next driver finds: this run's state could not be
    saved. An empty file needs no free blocks, so it usually lands even on
    a full disk; every failure is swallowed (the disk is why we are here)."""
    try:
        fd = os.open(paths.unsaved_marker(loop, run_id),
                     os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
        try:
            os.write(fd, message.encode()[:500])
        except OSError:
            pass
        os.close(fd)
    except OSError:
        pass


def remove_decision_dir(folder: Path) -> None:
    """An empty folder (most runs leave nothing) without importing shutil,
    whose rmtree (it follows no symlink the agent left there) does the rest."""
    try:
        os.rmdir(folder)
    except FileNotFoundError:
        pass
    except OSError:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


def install_shim(paths: Paths, body: str) -> Path:
    """`<state>/bin/loopctl`, rewritten only when its text changed; returns
    its folder, which goes first on the agent's PATH."""
    folder = ensure_dir(paths.state_dir / "bin")
    shim = folder / "loopctl"
    try:
        current = shim.read_text()
    except OSError:
        current = None
    if current != body:
        from loopctl.storage.atomic import atomic_write

        atomic_write(shim, body.encode())
        os.chmod(shim, 0o700)
    return folder
