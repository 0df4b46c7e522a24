"""The daemon's wake-up on file replacement (loopctl/engine/filewatch.py):
a rename onto a watched name, as every atomic write of state.json and
loops.yaml is, makes the descriptor readable and names a hit; writes of
other files in the same folders are read and ignored."""

from __future__ import annotations

import os
import select
import subprocess
from pathlib import Path

import pytest

from conftest import CLI, wait_for
from loopctl.engine.filewatch import FileWatch, open_watch
from loopctl.storage.atomic import atomic_write


def watch_of(*folders: Path) -> FileWatch:
    watch = open_watch([str(f) for f in folders], ["state.json", "loops.yaml"])
    if watch is None:
        pytest.skip("no inotify here")
    return watch


def readable(watch: FileWatch) -> bool:
    # Events are queued by the write itself: no waiting is needed.
    return bool(select.select([watch], [], [], 0)[0])


def test_an_atomic_replace_of_a_watched_name_is_a_hit(tmp_path: Path) -> None:
    config, state = tmp_path / "config", tmp_path / "state"
    config.mkdir()
    state.mkdir()
    watch = watch_of(config, state)
    try:
        assert not readable(watch)
        atomic_write(state / "state.json", b"{}")
        assert readable(watch) and watch.drain()
        assert not readable(watch)  # drained
        (config / "loops.yaml").write_text("version: 1\n")  # an editor's in-place save
        assert readable(watch) and watch.drain()
    finally:
        watch.close()


def test_other_files_wake_nothing(tmp_path: Path) -> None:
    watch = watch_of(tmp_path)
    try:
        atomic_write(tmp_path / "summary.json", b"{}")
        atomic_write(tmp_path / "lease.json", b"{}")
        (tmp_path / "runs").mkdir()
        (tmp_path / "runs" / "state.json").write_text("{}")  # not in a watched folder
        assert readable(watch)  # the events were queued...
        assert not watch.drain()  # ...and none named a watched file
    finally:
        watch.close()


def test_a_missing_folder_gives_no_watch(tmp_path: Path) -> None:
    assert open_watch([str(tmp_path / "absent")], ["state.json"]) is None


def test_the_descriptor_is_not_inherited(tmp_path: Path) -> None:
    watch = watch_of(tmp_path)
    try:
        assert not os.get_inheritable(watch.fd)  # an agent must not hold it
    finally:
        watch.close()


def watched_inodes(pid: int) -> set[int]:
    """The inodes a process's inotify descriptors watch (/proc fdinfo)."""
    found: set[int] = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:inotify":
                continue
            info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:
            continue
        for line in info.splitlines():
            if line.startswith("inotify wd:"):
                fields = dict(part.split(":", 1) for part in line.split()[1:])
                found.add(int(fields["ino"], 16))
    return found


def test_a_daemon_started_on_a_fresh_home_still_watches(cli: CLI) -> None:
    """Before any `start` nothing of the home exists; a watch on a missing
    folder fails, and the daemon would wait on its one-second stat for good
    (a trigger then took 0.5-1 s to fire, not a few ms)."""
    assert not cli.home.exists()
    proc = cli.popen("daemon", stderr=subprocess.DEVNULL)
    try:
        folders = [cli.home, cli.home / "state"]
        wait_for(lambda: all(f.is_dir() for f in folders))
        inodes = {f.stat().st_ino for f in folders}
        wait_for(lambda: watched_inodes(proc.pid) >= inodes, timeout=10)
    finally:
        proc.terminate()
        proc.wait(30)
