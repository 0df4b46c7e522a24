"""The daemon's note (storage/daemon_note.py): where a daemon that cannot
write says so to `doctor` and `ls`. Written in place at a fixed size, so
it takes no new block of a full disk; read as untrusted (anyone who can
write the home can plant one), and only while the daemon that wrote it
lives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loopctl.engine.daemon import RETRY_LIMIT, retry_after
from loopctl.storage import daemon_note
from loopctl.storage.paths import Paths
from loopctl.storage.proc_identity import ref


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    state = tmp_path / "state"
    state.mkdir()
    return Paths(tmp_path, state)


def test_an_error_is_said_in_place_and_cleared(paths: Paths) -> None:
    me = ref()
    daemon_note.prepare(paths, me)
    note = daemon_note.note_path(paths)
    inode = note.stat().st_ino
    assert daemon_note.read_error(paths) is None  # prepared: no error
    assert daemon_note.say(paths, me, "cannot write state.json: No space left", 100.0)
    assert daemon_note.read_error(paths) == {
        "error": "cannot write state.json: No space left", "since": 100.0, "pid": os.getpid()}
    assert note.stat().st_ino == inode and note.stat().st_size == daemon_note.NOTE_SIZE
    assert daemon_note.say(paths, me, "", 101.0)
    assert daemon_note.read_error(paths) is None


def test_a_long_or_non_ascii_error_still_fits(paths: Paths) -> None:
    me = ref()
    daemon_note.prepare(paths, me)
    assert daemon_note.say(paths, me, "\u00e9\U0001f4a5" * 5000, 1.0)
    assert daemon_note.note_path(paths).stat().st_size == daemon_note.NOTE_SIZE
    said = daemon_note.read_error(paths)
    assert said is not None and said["error"].startswith("\u00e9")


def test_a_note_of_a_gone_daemon_says_nothing(paths: Paths) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    proc = {"pid": int(gone.stdout), "ct": ref()["ct"]}
    daemon_note.prepare(paths, proc)
    daemon_note.say(paths, proc, "cannot write", 1.0)
    assert daemon_note.read_error(paths) is None


def test_say_never_grows_or_follows_what_is_planted(paths: Paths, tmp_path: Path) -> None:
    me = ref()
    note = daemon_note.note_path(paths)
    assert not daemon_note.say(paths, me, "x", 1.0)  # never prepared: nothing made
    assert not note.exists()
    target = tmp_path / "elsewhere"
    target.write_bytes(b" " * daemon_note.NOTE_SIZE)
    note.symlink_to(target)
    assert not daemon_note.say(paths, me, "x", 1.0)
    assert target.read_bytes() == b" " * daemon_note.NOTE_SIZE
    note.unlink()
    note.write_bytes(b"short")
    assert not daemon_note.say(paths, me, "x", 1.0) and note.read_bytes() == b"short"


PLANTED = [
    b"", b"\xff\xfe not utf-8", b"[" * 600, b"null", b"[]",
    json.dumps({"pid": "1", "ct": 0, "error": "x", "since": 1}).encode(),
    json.dumps({"pid": True, "ct": 0, "error": "x", "since": 1}).encode(),
    json.dumps({"pid": 2**40, "ct": 0, "error": "x", "since": 1}).encode(),
    b'{"pid": 1, "ct": NaN, "error": "x", "since": 1}',
    b'{"pid": 1, "ct": 1, "error": "x", "since": Infinity}',
    json.dumps({"pid": 1, "ct": 1, "error": ["x"], "since": 1}).encode(),
]


@pytest.mark.parametrize("data", PLANTED)
def test_a_planted_or_damaged_note_says_nothing(paths: Paths, data: bytes) -> None:
    daemon_note.note_path(paths).write_bytes(data)
    assert daemon_note.read_error(paths) is None


def test_a_huge_fifo_or_folder_note_says_nothing(paths: Paths) -> None:
    note = daemon_note.note_path(paths)
    note.write_bytes(b" " * (10 * 2**20))
    assert daemon_note.read_error(paths) is None
    note.unlink()
    os.mkfifo(note)
    assert daemon_note.read_error(paths) is None  # and does not block
    note.unlink()
    note.mkdir()
    assert daemon_note.read_error(paths) is None


def test_a_shown_error_is_one_printable_line(paths: Paths) -> None:
    me = ref()
    daemon_note.prepare(paths, me)
    daemon_note.say(paths, me, "disk\n\x1b[2Jfull\u202e", 1.0)
    said = daemon_note.read_error(paths)
    assert said is not None and said["error"] == "disk full", said


def test_a_failed_pass_is_retried_sooner_then_later_up_to_a_limit() -> None:
    waits = [retry_after(n) for n in range(1, 9)]
    assert waits == [1, 2, 4, 8, 16, RETRY_LIMIT, RETRY_LIMIT, RETRY_LIMIT]
    assert retry_after(10**9) == RETRY_LIMIT
    assert retry_after(5, limit=3.0) == 3.0
