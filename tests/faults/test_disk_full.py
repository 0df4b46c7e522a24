"""Fault 12: the disk fills up.

A real full file system where the machine lets us mount one (a small tmpfs as
LOOPCTL_HOME); everywhere, an injected OSError(ENOSPC) in-process. Expected:
a write that cannot be made fails with one clear line and leaves the previous
file whole; nothing fires that cannot be recorded; a loop whose state could
not be saved is paused with reason `error` rather than kept running.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import CLI, agent_command, loopctl_argv, wait_for
from loopctl.cli.app import run_app
from loopctl.domain.errors import LoopctlError
from loopctl.storage import atomic as store_mod

from .support import count_lines, in_flight, one_clear_line, start_gated, stop, supervisors

ENOSPC_TEXT = os.strerror(errno.ENOSPC)  # "No space left on device"


def fill(where: Path) -> Path:
    """Write a file until the file system is full."""
    filler = where / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (65536, 4096, 512, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    return filler


def files(home: Path) -> dict[str, bytes]:
    """Every file under home but the filler and the (empty) lock files."""
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*"))
            if p.is_file() and p.name != "filler" and p.suffix != ".lock"}


@pytest.fixture
def small_home(mount_tmpfs: Callable[[Path, str], Path], tmp_path: Path,
               monkeypatch: pytest.MonkeyPatch) -> CLI:
    """LOOPCTL_HOME on a 512 KiB tmpfs."""
    where = mount_tmpfs(tmp_path / "small", "512k")
    monkeypatch.setenv("LOOPCTL_HOME", str(where))
    return CLI(where)


# -- a real full file system --------------------------------------------------------

WRITERS = {
    "start": ("start", "new one", "--name", "new", "--every", "1h", "--command", "true"),
    "update": ("update", "kept", "--max-runs", "7"),
    "pause": ("pause", "kept"),
    "stop": ("stop", "kept"),
    "rm": ("rm", "kept"),
}


@pytest.mark.parametrize("command", list(WRITERS))
def test_a_write_on_a_full_disk_fails_in_one_line_and_keeps_the_files(
        small_home: CLI, command: str) -> None:
    cli = small_home
    cli("start", "p", "--name", "kept", "--every", "1h", "--after", "1h",
        "--command", "true", check=0)
    before = files(cli.home)
    filler = fill(cli.home)
    proc = cli(*WRITERS[command])
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert ENOSPC_TEXT in one_clear_line(proc.stderr)
    assert files(cli.home) == before, "a file changed, or a temp file was left behind"
    # With room again the same command works.
    filler.unlink()
    cli(*WRITERS[command], check=0)


def test_tick_on_a_full_disk_fires_nothing_and_says_why(small_home: CLI) -> None:
    cli = small_home
    cli("start", "p", "--name", "due", "--every", "1h", "--command", "true", check=0)
    before = files(cli.home)
    filler = fill(cli.home)
    proc = cli("tick")
    assert proc.returncode == 1
    assert ENOSPC_TEXT in one_clear_line(proc.stderr)
    assert not supervisors(cli.home)
    assert files(cli.home) == before
    filler.unlink()
    report = cli.json("tick", "--wait")
    assert [r["outcome"] for r in report["runs"]] == ["ok"]


def test_a_run_whose_output_fills_the_disk_is_recorded_and_the_files_parse(
        small_home: CLI) -> None:
    cli = small_home
    cli("start", "p", "--name", "flood", "--every", "1h",
        "--command", agent_command("--flood", str(4 * 2**20)), check=0)
    loops = (cli.home / "loops.yaml").read_bytes()
    spare = cli.home / "spare"
    spare.write_bytes(b"\0" * 96 * 1024)  # freed after the run
    proc = cli("tick", "--wait", "--json")
    assert proc.returncode == 1  # the run failed, or could not even be recorded
    assert "Traceback" not in proc.stderr
    (fired,) = json.loads(proc.stdout)["fired"]
    run_id = fired["run_id"]
    assert (cli.home / "loops.yaml").read_bytes() == loops
    cli.state()  # parses
    log = cli.state_dir / "runs" / "flood" / f"{run_id}.log"
    text = log.read_bytes()
    # The agent's bytes first; loopctl's own lines only after them.
    assert text.startswith(b"x" * 1023 + b"\n") and len(text) > 100 * 1024
    assert b"Traceback" not in text
    # With room again, the next pass accounts for the run.
    spare.unlink()
    cli("tick", check=0)
    history = cli.json("history", "flood")["runs"]
    assert [(r["run_id"], r["outcome"] in ("lost", "failed")) for r in history] == \
        [(run_id, True)], history
    assert cli.state()["loops"]["flood"]["run"] is None


@pytest.mark.slow  # the supervisor retries its save for a few seconds
def test_a_loop_whose_state_cannot_be_saved_is_paused_with_error(
        small_home: CLI, tmp_path: Path) -> None:
    cli = small_home
    gate, starts = tmp_path / "gate", tmp_path / "starts"
    start_gated(cli, "unsaved", gate, every="1s", starts=starts)
    cli("tick", check=0)
    wait_for(lambda: in_flight(cli, "unsaved"))
    filler = fill(cli.home)
    gate.touch()  # the run ends on a full disk: its settle cannot be written
    wait_for(lambda: not supervisors(cli.home))
    filler.unlink()
    cli("tick", check=0)
    status = cli.json("status", "unsaved")
    assert (status["status"], status["reason"]) == ("paused", "error"), status
    assert cli.json("tick")["fired"] == []
    assert count_lines(starts) == 1


def test_a_full_disk_makes_doctor_fail_and_leaves_the_state_whole(small_home: CLI) -> None:
    cli = small_home
    cli("start", "p", "--name", "kept", "--every", "1h", "--after", "1h",
        "--command", "true", check=0)
    cli("pause", "kept", check=0)  # an active loop with no driver is itself unhealthy
    healthy = cli.json("doctor")
    assert healthy["healthy"], healthy
    before = files(cli.home)
    filler = fill(cli.home)
    report = cli("doctor", "--json")
    assert report.returncode == 1, (report.stdout, report.stderr)
    found = json.loads(report.stdout)
    (disk,) = [f for f in found["findings"] if f["check"] == "disk"]
    assert disk["level"] == "error" and ENOSPC_TEXT in disk["message"], disk
    assert files(cli.home) == before, "doctor's probe left something behind"
    filler.unlink()
    assert cli.json("doctor")["healthy"]


def test_a_flood_on_a_full_disk_stops_the_log_and_the_run_goes_on(small_home: CLI) -> None:
    cli = small_home
    cli("start", "p", "--name", "flood", "--every", "1h",
        "--command", agent_command("--flood", str(4 * 2**20), "--print", "x"), check=0)
    spare = cli.home / "spare"
    spare.write_bytes(b"\0" * 128 * 1024)
    proc = subprocess.Popen(loopctl_argv("tick", "--wait"), env=dict(os.environ),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # The log stops growing at the full disk; the agent is not stuck on it.
    wait_for(lambda: not supervisors(cli.home) and proc.poll() is not None, timeout=30)
    spare.unlink()
    cli("tick", check=0)
    (run,) = cli.json("history", "flood")["runs"]
    assert run["outcome"] in ("ok", "lost"), run  # recorded by its supervisor or the next driver
    cli.state()  # parses


# -- injected ENOSPC (no mount needed) ----------------------------------------------


def enospc(*_args: object, **_kwargs: object) -> None:
    raise OSError(errno.ENOSPC, ENOSPC_TEXT)


@pytest.mark.parametrize("call", ["fsync", "replace"])
def test_atomic_write_failing_with_enospc_keeps_the_old_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str) -> None:
    target = tmp_path / "state.json"
    target.write_bytes(b'{"old": true}')
    # A local patch: undo() would also undo the fixture that isolates the home.
    with monkeypatch.context() as patch, pytest.raises(LoopctlError) as caught:
        patch.setattr(store_mod.os, call, enospc)
        store_mod.atomic_write(target, b'{"new": true}')
    assert caught.value.code == 1
    assert ENOSPC_TEXT in caught.value.message and str(target) in caught.value.message
    assert "\n" not in caught.value.message
    assert target.read_bytes() == b'{"old": true}'
    assert not list(tmp_path.glob(".state.json.*")), "a temp file was left behind"


def test_start_with_enospc_injected_exits_1_in_one_line(
        home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        run_app(["start", "p", "--name", "first", "--every", "1h", "--command", "true"])
    assert done.value.code == 0
    before = files(home)
    capsys.readouterr()
    real_replace = os.replace

    def replace(src: object, dst: object) -> None:
        if str(dst).startswith(str(home)):
            enospc()
        real_replace(src, dst)  # type: ignore[arg-type]

    with monkeypatch.context() as patch, pytest.raises(SystemExit) as done:
        patch.setattr(store_mod.os, "replace", replace)
        run_app(["start", "p", "--name", "second", "--every", "1h", "--command", "true"])
    assert done.value.code == 1
    assert ENOSPC_TEXT in one_clear_line(capsys.readouterr().err)
    assert files(home) == before


# -- a daemon on a disk that fills and frees ---------------------------------------------


def test_a_daemon_fires_again_once_space_frees_and_says_meanwhile_why_not(
        small_home: CLI, tmp_path: Path) -> None:
    """A daemon's pass that cannot record its fire is tried again with a
    backoff: once space frees it fires with no edit to any file, it said
    once that it could not and once that it resumes, and meanwhile
    `doctor` and `ls` name the daemon's write error."""
    cli = small_home
    cli("start", "p", "--name", "soon", "--every", "1h", "--after", "2s",
        "--command", "true", check=0)
    log = tmp_path / "daemon.log"
    with log.open("w") as out:
        daemon = cli.popen("daemon", stderr=out)
    try:
        wait_for(lambda: "lease acquired" in log.read_text())
        filler = fill(cli.home)  # before the loop comes due
        wait_for(lambda: "not firing" in log.read_text(), timeout=20)
        doctor = json.loads(cli("doctor", "--json").stdout)
        (said,) = [f for f in doctor["findings"] if "cannot write" in f["message"]
                   and f["check"] == "scheduler"]
        assert said["level"] == "error" and ENOSPC_TEXT in said["message"], said
        listed = cli("ls")
        assert "the daemon" in listed.stderr and ENOSPC_TEXT in listed.stderr, listed.stderr
        assert not supervisors(cli.home) and cli.records("soon") == []
        filler.unlink()
        wait_for(lambda: len(cli.records("soon")) == 1, timeout=20)
        text = log.read_text()
        assert text.count("not firing") == 1 and text.count("firing resumes") == 1, text
        assert not any("cannot write" in f["message"]
                       for f in json.loads(cli("doctor", "--json").stdout)["findings"])
        assert cli("ls").stderr == ""
    finally:
        stop(daemon)


# -- runs lost to a full disk -----------------------------------------------------------


@pytest.mark.slow  # each supervisor retries its save for a few seconds
def test_four_runs_ending_on_a_full_disk_all_pause_their_loops_with_enospc(
        small_home: CLI, tmp_path: Path) -> None:
    """Issue 49 item 4: every supervisor that cannot write says why in a
    place the next pass reads (its `.fault`, reserved before the run), so
    every loop pauses `error` naming ENOSPC; none fires on as "supervisor
    died" with the disk nowhere in its record."""
    cli = small_home
    gate = tmp_path / "gate"
    names = [f"full{n}" for n in range(4)]
    for name in names:
        start_gated(cli, name, gate, every="1s")
    assert sorted(f["loop"] for f in cli.json("tick")["fired"]) == names
    for name in names:
        wait_for(lambda name=name: in_flight(cli, name))
    filler = fill(cli.home)
    gate.touch()  # every run ends on a full disk
    wait_for(lambda: not supervisors(cli.home), timeout=30)
    filler.unlink()
    report = cli.json("tick")
    assert report["fired"] == [], report
    for name in names:
        status = cli.json("status", name)
        assert (status["status"], status["reason"]) == ("paused", "error"), status
        assert "ENOSPC" in status["note"] and ENOSPC_TEXT in status["note"], status
        (record,) = cli.records(name)  # a lost one says why; else its supervisor wrote it
        assert record["outcome"] != "lost" or "ENOSPC" in record["note"], record
    assert cli.json("tick")["fired"] == []
