"""Fault 13: a read-only home (a read-only bind mount: file modes do not stop
root). Reading commands work; writing commands fail with one clear line;
`tick` fires nothing and says why; `doctor` fails (nothing could be
recorded, DESIGN §14) naming the file system."""

from __future__ import annotations

import errno
import json
import os
import selectors
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import CLI, TESTS

from .support import one_clear_line, stop, supervisors

EROFS_TEXT = os.strerror(errno.EROFS)  # "Read-only file system"

READERS = [
    ("ls",), ("ls", "--json"), ("status",), ("status", "done"), ("status", "due", "--json"),
    ("show", "done"), ("show", "done", "--json"), ("history", "done"),
    ("history", "done", "--json"), ("logs", "done"), ("validate",),
    ("events",), ("agents",),
]
WRITERS = [
    ("start", "p", "--name", "new", "--every", "1h", "--command", "true"),
    ("update", "due", "--max-runs", "9"), ("pause", "due"), ("resume", "due"),
    ("stop", "due"), ("rm", "done"), ("run", "due"), ("tick",), ("tick", "--json"),
]


@pytest.fixture
def frozen(cli: CLI, read_only: Callable[[Path], Path]) -> CLI:
    """A home with one finished run and one loop due, then made read-only."""
    cli("start", "p", "--name", "done", "--every", "1h", "--command", "echo hello", check=0)
    cli("tick", "--wait", check=0)
    cli("start", "p", "--name", "due", "--every", "1h", "--command", "true", check=0)
    read_only(cli.home)
    return cli


@pytest.mark.slow
def test_reading_commands_work(frozen: CLI) -> None:
    for argv in READERS:
        proc = frozen(*argv)
        if argv == ("doctor",):
            # It works, and says the two things wrong here: nothing drives
            # `due`, and no run could be recorded on this read-only disk.
            failed = sorted(line for line in proc.stdout.splitlines() if line.startswith("FAIL"))
            assert proc.returncode == 1 and len(failed) == 2, proc.stdout
            assert failed[0].startswith("FAIL disk: cannot write to ")
            assert failed[1].startswith("FAIL drivers: ") and "nothing will fire" in failed[1]
        else:
            assert proc.returncode == 0, (argv, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr, (argv, proc.stderr)
    assert "hello" in frozen("logs", "done").stdout
    assert frozen.json("status", "due")["status"] == "active"
    # `agents` runs `--version` of every agent CLI it finds: only the fake
    # claude of tests/bin may be found (the test PATH hides the developer's).
    env = {"PATH": f"{TESTS / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    found = {row["preset"]: row for row in frozen.json("agents", env=env)["agents"]
             if row["path"] and row["preset"] != "shell"}
    assert list(found) == ["claude"], found
    assert found["claude"]["path"] == str(TESTS / "bin" / "claude")
    doctor = frozen("doctor")
    assert doctor.returncode == 1 and "Traceback" not in doctor.stderr, doctor
    assert f"FAIL disk: cannot write to {frozen.state_dir}: {EROFS_TEXT}" in doctor.stdout
    # Room would not help: the remedy names the read-only file system.
    (disk,) = [line for line in doctor.stdout.splitlines() if line.startswith("FAIL disk")]
    assert disk.endswith("read-only file system: remount it read-write"), disk
    assert "free space" not in disk, disk


def test_writing_commands_fail_in_one_clear_line(frozen: CLI) -> None:
    for argv in WRITERS:
        proc = frozen(*argv)
        assert proc.returncode == 1, (argv, proc.stdout, proc.stderr)
        assert EROFS_TEXT in one_clear_line(proc.stderr), argv
        if "--json" in argv:  # the failure as a JSON error object, and nothing else
            error = json.loads(proc.stdout)["error"]
            assert error["code"] == 1 and EROFS_TEXT in error["message"], (argv, proc.stdout)
        else:
            assert proc.stdout == "", argv


def test_tick_fires_nothing_on_a_read_only_home(frozen: CLI) -> None:
    proc = frozen("tick")
    assert EROFS_TEXT in one_clear_line(proc.stderr)
    assert not supervisors(frozen.home)
    assert len(frozen.records("done")) == 1
    assert not (frozen.state_dir / "runs" / "due").exists()
    assert frozen.state()["loops"]["due"]["run"] is None


def test_tick_on_a_read_only_home_reports_a_handled_error(frozen: CLI) -> None:
    proc = frozen("tick")
    assert proc.returncode == 1
    line = one_clear_line(proc.stderr)
    assert EROFS_TEXT in line and "unexpected error" not in line, line


def run_daemon_briefly(cli: CLI) -> tuple[int, str]:
    """A daemon until it has said why it cannot work (or 15 s), then SIGTERM.
    A short TTL: it retries the lease every second, so it stops quickly."""
    daemon = cli.popen("daemon", env={"LOOPCTL_LEASE_TTL": "3"}, stderr=subprocess.PIPE)
    assert daemon.stderr is not None
    log = []
    with selectors.DefaultSelector() as selector:
        selector.register(daemon.stderr, selectors.EVENT_READ)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not any(EROFS_TEXT in line for line in log):
            if selector.select(timeout=0.2):
                line = daemon.stderr.readline()
                if not line:
                    break
                log.append(line)
    code = stop(daemon)
    return code, "".join(log) + daemon.stderr.read()


def test_daemon_on_a_read_only_home_says_why_and_fires_nothing(frozen: CLI) -> None:
    code, log = run_daemon_briefly(frozen)
    assert EROFS_TEXT in log, log
    assert "Traceback" not in log and "unexpected error" not in log, log
    assert not supervisors(frozen.home)
    assert len(frozen.records("done")) == 1
    assert code == 0, log  # stopped by SIGTERM, cleanly, after saying why it could not work


def test_daemon_does_not_claim_to_release_a_lease_it_never_held(frozen: CLI) -> None:
    _, log = run_daemon_briefly(frozen)
    assert "lease released" not in log, log
