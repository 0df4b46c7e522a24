"""Helpers shared by the fault suite (fixtures live in conftest.py)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

from conftest import CLI
from loopctl.domain.timestamps import parse_iso


def gated(gate: Path, starts: Path | None = None) -> str:
    """A `--command` whose agent notes its start (a line in `starts`), waits
    until `gate` exists, then prints "ran": the test, not the machine's
    speed, decides how long a run stays in flight."""
    note = 'echo "$$" >> "$2"; ' if starts else ""
    script = f'{note}while [ ! -e "$1" ]; do sleep 0.05; done; echo ran'
    return shlex.join(["sh", "-c", script, "gated-agent", str(gate), str(starts or "")])


def start_gated(cli: CLI, name: str, gate: Path, every: str = "1h",
                starts: Path | None = None) -> None:
    cli("start", "the prompt", "--name", name, "--every", every,
        "--command", gated(gate, starts), check=0)


def count_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def loop_state(cli: CLI, name: str) -> dict[str, Any]:
    return cli.state()["loops"][name]


def in_flight(cli: CLI, name: str) -> dict[str, Any] | None:
    """The run in flight once its agent has started, else None."""
    run = loop_state(cli, name).get("run")
    return run if run and run.get("agent") else None


def settled(cli: CLI, name: str) -> bool:
    st = loop_state(cli, name)
    return not st.get("run")


def lease(cli: CLI) -> dict[str, Any] | None:
    try:
        return json.loads((cli.state_dir / "lease.json").read_text())
    except FileNotFoundError:
        return None


def clock_at(instant: float) -> dict[str, str]:
    """Environment that puts loopctl's clock at `instant` (POSIX seconds)."""
    return {"LOOPCTL_CLOCK_OFFSET": repr(instant - time.time())}


def shifted(seconds: float) -> dict[str, str]:
    return {"LOOPCTL_CLOCK_OFFSET": repr(float(seconds))}


def catches(pid: int, sig: int) -> bool:
    """The process has installed a handler for `sig` (Linux: SigCgt)."""
    return _in_mask(pid, sig, "SigCgt")


def ignores(pid: int, sig: int) -> bool:
    """The process ignores `sig` (Linux: SigIgn)."""
    return _in_mask(pid, sig, "SigIgn")


def _in_mask(pid: int, sig: int, field: str) -> bool:
    """False when the process is gone."""
    try:
        return bool(signal_mask(pid, field) >> (sig - 1) & 1)
    except OSError:
        return False


def signal_mask(pid: int, field: str) -> int:
    """One of /proc/PID/status's signal masks (SigCgt, SigIgn, ...); raises
    OSError when the process is gone."""
    with open(f"/proc/{pid}/status") as handle:
        line = next((x for x in handle if x.startswith(field + ":")), f"{field}: 0")
    return int(line.split()[1], 16)


def asleep_in_select(pid: int) -> bool:
    """The process's main thread is blocked in select() or poll(): a daemon
    that finished its pass and waits for a wake (Linux: /proc/PID/task/PID/
    wchan, "0" while it runs). A file it watches that changed before this
    is asked has already woken it, so True means that change was seen.
    False when the process is gone."""
    try:
        with open(f"/proc/{pid}/task/{pid}/wchan") as handle:
            wchan = handle.read()
    except OSError:
        return False
    return "poll" in wchan or "select" in wchan


def signals_delivered(pid: int) -> bool:
    """No signal waits to be delivered to the process (SigPnd and ShdPnd of
    /proc/PID/status are empty): one sent before has been acted on, or
    dropped because it was ignored. True when the process is gone."""
    try:
        return not (signal_mask(pid, "SigPnd") or signal_mask(pid, "ShdPnd"))
    except OSError:
        return True


def stop(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout: float = 15) -> int:
    """Stop a process this test started; SIGKILL if it does not go. A
    process still starting up (not yet handling `sig`) is waited for first,
    so a slow import on a busy machine is not mistaken for a crash."""
    from conftest import wait_for

    if proc.poll() is None and sig in (signal.SIGTERM, signal.SIGINT):
        wait_for(lambda: proc.poll() is not None or catches(proc.pid, sig), timeout=timeout)
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"pid {proc.pid} did not exit on signal {sig}") from None


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def ts(text: str) -> float:
    return parse_iso(text)


def home_processes(home: Path) -> list[psutil.Process]:
    """Processes started for this test: their LOOPCTL_HOME lies under `home`."""
    found = []
    me = os.getpid()
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == me:
            continue
        try:
            value = proc.environ().get("LOOPCTL_HOME", "")
        except (psutil.Error, OSError):
            continue
        if value and (value == str(home) or value.startswith(str(home) + os.sep)):
            found.append(proc)
    return found


def is_supervisor(proc: psutil.Process) -> bool:
    """A run's supervisor: forked from a loopctl driver into a session of its
    own (same command line as the driver), or `python -m loopctl.engine.supervisor`."""
    cmd = proc.cmdline()
    if "loopctl.engine.supervisor" in cmd:
        return True
    runs_loopctl = any(part == "loopctl" or part.endswith("/loopctl") for part in cmd)
    return runs_loopctl and os.getsid(proc.pid) == proc.pid


def supervisors(home: Path) -> list[psutil.Process]:
    out = []
    for proc in home_processes(home):
        try:
            if is_supervisor(proc):
                out.append(proc)
        except (psutil.Error, OSError):
            continue
    return out


def one_clear_line(stderr: str) -> str:
    """stderr holds exactly one line, and it is not a traceback."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr, stderr
    return lines[0]


