"""`daemon --serve ADDR`: the driver and the server in one process; a
trigger through the API fires within about a second, and the answer says
no driver is missing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import CLI, agent_command, loopctl_argv, wait_for
from serve.support import Served


@pytest.mark.slow
def test_daemon_serve_fires_what_the_api_triggers(cli: CLI, tmp_path: Path) -> None:
    cli("start", "p", "--name", "od", "--on-demand", "--command",
        agent_command("--print", "fired"), check=0)
    log = open(tmp_path / "daemon.stderr", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(loopctl_argv("daemon", "--serve", "127.0.0.1:0"),
                            stdout=subprocess.PIPE, stderr=log, text=True, env=dict(os.environ))
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("loopctl serve: open "), (tmp_path / "daemon.stderr").read_text()
        served = Served(proc, first.split("open ", 1)[1].strip())  # type: ignore[arg-type]
        status, said = served.json("POST", "/api/loops/od/trigger", b"from the API")
        # trigger --json's shape: the driver that fires it (issue 51 item 14).
        assert status == 202 and said["driver"] == "daemon" and said["driver_note"] is None, said
        record = wait_for(lambda: cli.records("od"), timeout=30)[0]
        assert (record["outcome"], record["trigger"]) == ("ok", "api")
        settled = wait_for(lambda: served.json("GET", "/api/loops")[1]["loops"][0]["last_run"])
        assert settled["outcome"] == "ok"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        log.close()
        if proc.stdout is not None:
            proc.stdout.close()
    said = (tmp_path / "daemon.stderr").read_text()
    assert "fired od" in said and "loopctl serve: trigger od" in said
    assert not (cli.state_dir / "lease.json").exists() or json.loads(
        (cli.state_dir / "lease.json").read_text()).get("pid") != proc.pid


def test_a_trigger_accepted_while_a_pass_waits_for_the_lock_still_fires(cli: CLI) -> None:
    """A driver takes `now`, then waits for the store lock that a trigger
    holds: the trigger's due time is after that `now`, which is no clock
    going back (the race a trigger through `serve` beside a daemon met)."""
    from loopctl import clock
    from loopctl.commands.trigger import trigger
    from loopctl.engine.firing import driver_pass, wait_for_children
    from loopctl.storage.store import Store

    cli("start", "p", "--name", "od", "--on-demand", "--command", agent_command(), check=0)
    before = clock.now()
    trigger(Store(), "od", None)
    early = driver_pass(Store(), before)  # the `now` it took before the trigger's lock
    assert "clock went back" not in str(cli.state()["loops"]["od"].get("note"))
    assert early.wake_at is not None, "the trigger is kept: the driver wakes for it"
    report = driver_pass(Store(), clock.now())
    wait_for_children(report.children)
    assert [f["loop"] for f in early.fired + report.fired] == ["od"]


def test_a_trigger_before_the_daemon_has_the_lease_names_the_daemon(cli: CLI,
                                                                      tmp_path: Path) -> None:
    """`daemon --serve` serves at once; a trigger answered before its daemon
    takes the lease (here: held by another driver) is still this process's
    to fire, not `driver: none` beside no note (seen in CI under load)."""
    from loopctl.storage.lease import LeaseFile
    from loopctl.storage.store import Store

    cli("start", "p", "--name", "od", "--on-demand", "--command", "true", check=0)
    assert LeaseFile(Store().paths, "tick", ttl=600).acquire(time.time()) is None
    log = open(tmp_path / "daemon.stderr", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(loopctl_argv("daemon", "--serve", "127.0.0.1:0"),
                            stdout=subprocess.PIPE, stderr=log, text=True,
                            env=dict(os.environ, LOOPCTL_LEASE_TTL="600"))
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        served = Served(proc, first.split("open ", 1)[1].strip())  # type: ignore[arg-type]
        status, said = served.json("POST", "/api/loops/od/trigger", b"")
        assert status == 202, said
        assert (said["driver"], said["driver_pid"], said["driver_note"]) == (
            "daemon", proc.pid, None), said
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        log.close()
        if proc.stdout is not None:
            proc.stdout.close()
