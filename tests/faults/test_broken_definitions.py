"""Faults 14 and 15: `loops.yaml` edited by hand while the daemon runs.

15's core (garbage file: the daemon stops firing, says why, resumes when the
file is fixed) is tests/engine/test_drivers_sharing_a_home.py
(test_daemon_stops_firing_on_a_broken_file_and_resumes); added here: it keeps
the lease all the while, so no tick fires behind its back.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from conftest import CLI, wait_for
from loopctl.storage.atomic import atomic_write
from loopctl.storage.paths import file_signature

from .support import lease, stop

BROKEN = "every: 1 hour"


@pytest.mark.slow
def test_one_broken_entry_disables_only_that_loop_and_is_kept_as_written(cli: CLI) -> None:
    cli("start", "p", "--name", "good", "--every", "1s", "--command", "true", check=0)
    cli("start", "p", "--name", "bad", "--every", "1h", "--after", "3s",
        "--command", "true", check=0)
    loops = cli.home / "loops.yaml"
    daemon = cli.popen("daemon", stderr=subprocess.PIPE)
    try:
        # The user breaks one entry, seconds before it comes due.
        text = loops.read_text()
        assert text.count("every: 1h\n") == 1
        loops.write_text(text.replace("every: 1h\n", BROKEN + "\n"))
        written = loops.read_bytes()
        bad_due = time.time() + 3
        wait_for(lambda: cli.records("good"))
        count = len(cli.records("good"))
        # The broken loop's due time passes; the good one keeps firing.
        wait_for(lambda: time.time() > bad_due + 1 and len(cli.records("good")) >= count + 3,
                 timeout=30)

        listed = {loop["name"]: loop for loop in cli.json("ls")["loops"]}
        assert listed["good"]["status"] in ("active", "running")
        assert listed["bad"]["status"] == "invalid"
        assert "every" in listed["bad"]["error"] and "1 hour" in listed["bad"]["error"]
        human = cli("ls", check=0).stdout
        assert any(line.startswith("bad") and "invalid" in line for line in human.splitlines())
        doctor = cli("doctor")
        assert doctor.returncode == 1 and "'bad' is invalid" in doctor.stdout
        assert cli("validate").returncode == 2
        assert cli.records("bad") == []
        # Every state write since, and no rewrite of the user's file.
        assert loops.read_bytes() == written
    finally:
        stop(daemon)
    assert all(r["outcome"] == "ok" for r in cli.records("good"))
    # A command asked to change the file keeps the broken entry as written.
    cli("update", "good", "--max-runs", "99", check=0)
    assert BROKEN in loops.read_text()
    assert cli.records("bad") == []


@pytest.mark.slow
def test_daemon_keeps_the_lease_while_the_file_is_garbage(cli: CLI) -> None:
    env = {"LOOPCTL_LEASE_TTL": "3"}  # heartbeat every second
    cli("start", "p", "--name", "steady", "--every", "1h", "--command", "true", check=0)
    loops = cli.home / "loops.yaml"
    good = loops.read_text()
    daemon = cli.popen("daemon", env=env, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: cli.records("steady"))
        broken_at = time.time()
        # Replaced whole, as an editor's save-by-rename: an in-place write has an
        # empty moment, which the daemon (woken at once by inotify) may see and
        # rightly report as a second, different error.
        atomic_write(loops, b"version: 1\nloops: [oops\n")
        # Renewed more than a TTL after the break: never let go.
        wait_for(lambda: (lease(cli) or {}).get("heartbeat", 0) > broken_at + 3.5, timeout=20)
        assert lease(cli)["pid"] == daemon.pid
        report = cli.json("tick", env=env)
        assert report["deferred_to"]["pid"] == daemon.pid
        assert report["fired"] == []
        assert len(cli.records("steady")) == 1
        atomic_write(loops, good.encode())  # the fix saved whole too (no empty moment)
        # Its next pass reconciles the state with the fixed file.
        wait_for(lambda: cli.state()["defs_sig"] == file_signature(loops))
    finally:
        stop(daemon)
    log = daemon.stderr.read() if daemon.stderr else ""
    assert log.count("not firing") == 1, log  # said once, not at every pass
    assert "firing resumes" in log
