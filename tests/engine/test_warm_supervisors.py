"""A daemon's runs are supervised by warm supervisors (engine/warm.py): one
process, forked once, supervises run after run, so a run no longer pays
for copying the daemon's pages. Each run still has one supervisor recorded
for it, the run is lost when that process dies, and no worker outlives the
daemon or carries its descriptors."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from faults.support import gated, ignores, in_flight, lease, loop_state, signals_delivered

from conftest import CLI, wait_for
from loopctl.engine import warm
from loopctl.engine.warm import Pool, Worker

pytestmark = pytest.mark.slow


def parents_agent(out: Path) -> str:
    """An agent that notes the pid of its parent: the run's supervisor."""
    return shlex.join(["sh", "-c", 'echo "$PPID" >> "$1"', "agent", str(out)])


def noting_loop(cli: CLI, tmp_path: Path, name: str, every: str = "1h") -> Path:
    """A loop whose agent notes its supervisor's pid; the file it notes in."""
    out = tmp_path / "parents"
    cli("start", "p", "--name", name, "--every", every, "--sandbox", "off",
        "--command", parents_agent(out), check=0)
    return out


def daemon(cli: CLI) -> subprocess.Popen[str]:
    proc = cli.popen("daemon", "--quiet")
    wait_for(lambda: (lease(cli) or {}).get("pid") == proc.pid)
    return proc


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def ended(cli: CLI, name: str, count: int) -> bool:
    return len(cli.records(name)) >= count and not loop_state(cli, name).get("run")


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_daemons_runs_share_one_warm_supervisor(cli: CLI, tmp_path: Path) -> None:
    out = noting_loop(cli, tmp_path, "warm", "1s")
    proc = daemon(cli)
    try:
        wait_for(lambda: ended(cli, "warm", 3), timeout=30)
        parents = lines(out)
        assert len(set(parents)) == 1, parents  # forked per run: one pid per run
        worker = psutil.Process(int(parents[0]))
        assert worker.is_running() and worker.ppid() == proc.pid
        assert {r["outcome"] for r in cli.records("warm")} == {"ok"}
        # Not the daemon's wake-up pipe or its file watch.
        kinds = {os.readlink(f"/proc/{worker.pid}/fd/{fd}")
                 for fd in os.listdir(f"/proc/{worker.pid}/fd")}
        assert not any("inotify" in kind for kind in kinds), kinds
    finally:
        stop(proc)
    wait_for(lambda: not psutil.pid_exists(int(parents[0])) or
             psutil.Process(int(parents[0])).status() == psutil.STATUS_ZOMBIE)


def test_a_stop_meant_for_a_finished_run_spares_the_worker(cli: CLI, tmp_path: Path) -> None:
    out = noting_loop(cli, tmp_path, "once")
    proc = daemon(cli)
    try:
        wait_for(lambda: ended(cli, "once", 1))
        worker = int(lines(out)[0])
        # Back to waiting for a job. (A stop that lands while the finished
        # run is still being settled may end the worker, as it would have
        # ended a supervisor forked for that run; the run is settled.)
        wait_for(lambda: ignores(worker, signal.SIGTERM))
        os.kill(worker, signal.SIGTERM)  # as `stop` would, a moment too late
        wait_for(lambda: signals_delivered(worker))  # acted on (or dropped), not in flight
        assert psutil.Process(worker).status() != psutil.STATUS_ZOMBIE
        cli("trigger", "once", check=0)
        wait_for(lambda: ended(cli, "once", 2))
        assert lines(out) == [str(worker)] * 2
        assert [r["outcome"] for r in cli.records("once")] == ["ok", "ok"]
    finally:
        stop(proc)


def open_files(pid: int) -> list[str]:
    """What each of a process's descriptors is (paths, sockets, pipes)."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            found.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except FileNotFoundError:  # closed meanwhile
            continue
    return found


def test_a_worker_holds_no_runs_file_between_runs(cli: CLI, tmp_path: Path) -> None:
    """The log of the run a worker was forked for is not kept open for the
    worker's life: between runs it holds nothing under runs/, so a pruned
    or deleted log frees its space while the daemon runs."""
    out = noting_loop(cli, tmp_path, "twice")
    runs = str((cli.state_dir / "runs").resolve())
    proc = daemon(cli)
    try:
        for count in (1, 2):
            wait_for(lambda count=count: ended(cli, "twice", count))
            worker = int(lines(out)[0])
            wait_for(lambda worker=worker: ignores(worker, signal.SIGTERM))  # waiting for a job
            held = [f for f in open_files(worker) if f.startswith(runs)]
            assert held == [], held
            if count == 1:
                cli("trigger", "twice", check=0)
        assert lines(out) == [str(worker)] * 2  # the same worker ran both
    finally:
        stop(proc)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_no_worker_outlives_its_daemon(cli: CLI, tmp_path: Path, how: int) -> None:
    out = noting_loop(cli, tmp_path, "once")
    proc = daemon(cli)
    try:
        wait_for(lambda: ended(cli, "once", 1))
        worker = psutil.Process(int(lines(out)[0]))
        proc.send_signal(how)
        proc.wait(timeout=30)
        worker.wait(timeout=20)  # its job socket closed: it ends
    finally:
        stop(proc)


def test_a_worker_killed_mid_run_loses_that_run_only(cli: CLI, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    cli("start", "p", "--name", "held", "--every", "1h", "--sandbox", "off",
        "--command", gated(gate), check=0)
    proc = daemon(cli)
    try:
        run = wait_for(lambda: in_flight(cli, "held"))
        os.kill(run["supervisor"]["pid"], signal.SIGKILL)
        wait_for(lambda: ended(cli, "held", 1))
        assert cli.records("held")[0]["outcome"] == "lost"
        gate.touch()
        cli("trigger", "held", check=0)
        wait_for(lambda: ended(cli, "held", 2))
        second = cli.records("held")[1]
        assert second["outcome"] == "ok", second
    finally:
        gate.touch()
        stop(proc)


def test_idle_workers_are_retired_when_idle_too_long_or_worn() -> None:
    pool = Pool()
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET) for _ in range(2)]
    fresh, worn = (Worker(100 + n, ours) for n, (ours, _) in enumerate(pairs))
    worn.runs = warm.RUNS_PER_WORKER
    pool.busy = {fresh.pid: fresh, worn.pid: worn}
    os.write(pool.done_w, b"100\n101\n")
    pool.settled(now=1000.0)
    assert pool.idle == [fresh] and not pool.busy
    assert pairs[1][1].recv(16) == b""  # the worn one's job socket is closed
    pool.settled(now=1000.0 + warm.IDLE_LIMIT - 1)
    assert pool.idle == [fresh]
    pool.settled(now=1000.0 + warm.IDLE_LIMIT + 1)
    assert pool.idle == [] and pairs[0][1].recv(16) == b""
    for _, theirs in pairs:
        theirs.close()
    pool.close()


def test_a_run_folder_that_cannot_hold_the_log_is_that_loops_error(
        cli: CLI, tmp_path: Path) -> None:
    """As with a supervisor forked per run, the daemon readies the run's
    folder and log before it hands the run over: a file planted as the
    loop's run folder pauses that loop with the reason (no run lost), and
    the other loops fire."""
    for name in ("bad", "good"):
        noting_loop(cli, tmp_path, name)
    runs = cli.state_dir / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    if (runs / "bad").is_dir():
        (runs / "bad").rmdir()
    (runs / "bad").write_text("not a folder")
    proc = daemon(cli)
    try:
        wait_for(lambda: ended(cli, "good", 1))
        bad = wait_for(lambda: (st := loop_state(cli, "bad"))["status"] == "paused" and st)
        assert bad["reason"] == "error" and "runs" in (bad.get("note") or ""), bad
        assert cli.records("good")[0]["outcome"] == "ok"
    finally:
        stop(proc)


def test_a_fork_that_fails_is_the_loops_error_not_the_daemons(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from loopctl.domain.errors import LoopctlError
    from loopctl.storage.store import Store

    def no_fork() -> int:
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(warm.os, "fork", no_fork)
    pool = Pool()
    with pytest.raises(LoopctlError, match="cannot start a supervisor: Resource"):
        pool.launch(Store(), "quick", "20261204T000000Z-0001")
    assert not pool.busy and not pool.idle
    pool.close()


LEFT_BEHIND = textwrap.dedent("""
    import os, subprocess, sys, threading
    from loopctl.engine import warm
    from loopctl.engine.containment.cgroup import own_cgroup

    home = own_cgroup()
    seen = [warm.clean_after_run(home)]
    child = subprocess.Popen(["sleep", "30"])
    seen.append(warm.clean_after_run(home))
    child.kill()
    # Until it has exited, but not reaped (WNOWAIT): the check reaps it.
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    seen.append(warm.clean_after_run(home))
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    seen.append(warm.clean_after_run(home))
    stop.set()
    thread.join()
    seen.append(warm.clean_after_run("/sys/fs/cgroup/elsewhere"))
    print(seen)
""")


def test_a_worker_retires_when_its_run_left_a_child_a_thread_or_another_cgroup() -> None:
    proc = subprocess.run([sys.executable, "-c", LEFT_BEHIND], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[True, False, True, False, False]"
