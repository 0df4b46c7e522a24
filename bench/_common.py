"""Shared helpers for loopctl's benchmarks (stdlib + psutil only).

Every benchmark builds throwaway `LOOPCTL_HOME`s under one temp dir (never
the real home), measures the subject and its baseline interleaved in the same
run, and reports medians and ratios. The last line a benchmark prints is
`BENCH-RESULT {json}`, which `run_all.py` collects into its table.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

PY = sys.executable
_script = Path(sys.executable).parent / "loopctl"
# The console script, as a user (or cron) runs it.
LOOPCTL = str(_script) if _script.exists() else (shutil.which("loopctl") or "loopctl")


def loopctl(*args: str) -> list[str]:
    return [LOOPCTL, *args]


# -- homes -------------------------------------------------------------------


class Workspace:
    """One temp dir per benchmark run; removed on exit."""

    def __init__(self, name: str, parent: str | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix=f"loopctl-bench-{name}-", dir=parent))
        self._n = 0

    def home(self, label: str = "home") -> Path:
        self._n += 1
        return self.root / f"{label}-{self._n}"

    def close(self) -> None:
        # Supervisors still writing (after a failed repetition) could re-create
        # files under the tree while it is removed: wait for them, then retry.
        try:
            wait_quiet(60)
        except RuntimeError:
            pass
        for _ in range(3):
            shutil.rmtree(self.root, ignore_errors=True)
            if not self.root.exists():
                return
            time.sleep(0.5)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def env_for(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPCTL_")}
    env["LOOPCTL_HOME"] = str(home)
    env["NO_COLOR"] = "1"
    env.update(extra)
    return env


def iso_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def loop_entry(name: str, command: list[str], every: str = "1h", after: str | None = None,
               cwd: str | None = None, **extra: Any) -> str:
    """One `loops.yaml` entry (scalars written as JSON, which YAML reads)."""
    lines = [f"  {name}:",
             "    prompt: bench",
             "    command: " + json.dumps(command),
             f"    every: {every}"]
    if after:
        lines.append(f"    after: {after}")
    lines.append("    cwd: " + json.dumps(cwd or tempfile.gettempdir()))
    lines.append("    timeout: 1h")
    for key, value in extra.items():
        lines.append(f"    {key}: {json.dumps(value)}")
    lines.append("    created_at: " + json.dumps(iso_now()))
    return "\n".join(lines) + "\n"


def write_loops(home: Path, entries: list[str], top: str = "") -> None:
    """`top`: top-level settings, e.g. "max_concurrent: 0\n"."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    text = "version: 1\n" + top + "loops:\n" + "".join(entries)
    path = home / "loops.yaml"
    path.write_text(text)
    path.chmod(0o600)


def copy_home(template: Path, dest: Path) -> Path:
    """Copy a reconciled home and re-point state's `defs_sig` at the copy's
    loops.yaml (the signature includes the inode), so the copy is exactly a
    steady-state home, as after the previous cron tick."""
    shutil.copytree(template, dest)
    state_file = dest / "state" / "state.json"
    if state_file.exists():
        data = state_file.read_bytes()
        state = json.loads(data)
        st = os.stat(dest / "loops.yaml")
        if state.get("defs_sig") is not None:
            # In place, in the bytes: the layout loopctl wrote is kept (one
            # entry a line, which `status NAME` relies on).
            old = json.dumps(state["defs_sig"], separators=(",", ":")).encode()
            state["defs_sig"] = [st.st_mtime_ns, st.st_size, st.st_ino]
            new = json.dumps(state["defs_sig"], separators=(",", ":")).encode()
            data = data.replace(b'"defs_sig":' + old, b'"defs_sig":' + new, 1)
            assert json.loads(data)["defs_sig"] == state["defs_sig"], "defs_sig not re-pointed"
        state_file.write_bytes(data)
        _repoint_summary(dest / "state", data, state.get("defs_sig"))
    return dest


def _repoint_summary(state_dir: Path, state_bytes: bytes, defs_sig: Any) -> None:
    """The summary beside state.json names the state's bytes and file (and
    the loops.yaml signature): re-point it at the copy like state itself."""
    summary_file = state_dir / "summary.json"
    if not summary_file.exists():
        return
    summary = json.loads(summary_file.read_text())
    st = os.stat(state_dir / "state.json")
    from loopctl.storage import home_key

    key = home_key.load(state_dir)  # copied with the home: the MAC is the copy's own
    summary.update(defs_sig=defs_sig, state_mac=key and home_key.mac(key, state_bytes),
                   state_sig=[st.st_mtime_ns, st.st_size, st.st_ino])
    summary_file.write_text(json.dumps(summary))


def reconciled(home: Path, entries: list[str], top: str = "") -> dict[str, Any]:
    """Write `home`'s loops.yaml and take one `tick` (which fires nothing:
    the entries are not due yet), so state.json is a steady-state home's;
    the tick's JSON."""
    write_loops(home, entries, top)
    out: dict[str, Any] = json.loads(check(loopctl("tick", "--json"), env_for(home)))
    assert not out["fired"], f"template fired {out['fired']}"
    return out


def past_wake(home: Path) -> None:
    """Until the wake time state.json names has passed: its loops are due."""
    wake = json.loads((home / "state" / "state.json").read_text())["wake_at"]
    while time.time() <= wake + 0.05:
        time.sleep(0.05)


def run_records(home: Path) -> list[Path]:
    runs = home / "state" / "runs"
    if not runs.is_dir():
        return []
    return sorted(p for p in runs.glob("*/*.json") if not p.name.endswith(".decision.json"))


# -- a daemon's processes ------------------------------------------------------


def start_daemon(home: Path, *args: str, env: dict[str, str] | None = None,
                 stderr: int = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    """`loopctl daemon ARGS` on `home`, its stdout discarded."""
    return subprocess.Popen(loopctl("daemon", *args), env=env or env_for(home),
                            stdout=subprocess.DEVNULL, stderr=stderr)


def stop(proc: subprocess.Popen[bytes], timeout: float = 30) -> bytes:
    """SIGTERM, as `kill` would, and wait; SIGKILL after `timeout`. What it
    wrote to a piped stderr (else b"")."""
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err or b""


def wait_until(ready: Callable[[], object], what: str, timeout: float = 60,
               step: float = 0.05) -> None:
    """Poll `ready` every `step` seconds; RuntimeError naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(step)
    raise RuntimeError(f"{what}: not within {timeout:.0f}s")




def daemon_cpu(daemon: psutil.Process) -> tuple[float, float]:
    """(the daemon's own user+sys, its supervisors'): those it reaped, and the
    warm ones alive between runs with the agents they reaped."""
    t = daemon.cpu_times()
    supervisors = t.children_user + t.children_system
    for child in daemon.children():
        try:
            c = child.cpu_times()
        except psutil.Error:
            continue
        supervisors += c.user + c.system + c.children_user + c.children_system
    return t.user + t.system, supervisors


def run_in_flight(home: Path, daemon: psutil.Process) -> bool:
    """A daemon's supervisor has a child (its agent), or state.json's summary
    says a run is in flight. Unsure (a process gone meanwhile, no summary
    yet): in flight."""
    try:
        if any(w.children() for w in daemon.children()):
            return True
        return b'"busy":false' not in (home / "state" / "summary.json").read_bytes()
    except (psutil.Error, OSError):
        return True


# -- processes ---------------------------------------------------------------


def children_cpu() -> float:
    """User+sys seconds of every child this process has reaped so far
    (RUSAGE_CHILDREN): subtract two readings around what is measured."""
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def cpu_with_children() -> float:
    """This process's user+sys seconds and its reaped children's."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime + children_cpu()



def become_subreaper() -> bool:
    """Adopt the detached supervisors our `tick`s start, so we can wait for
    them before the next repetition (Linux; harmless elsewhere)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def reap() -> None:
    """Collect exited adopted children (never a Popen we still wait on:
    callers only call this when they hold none)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def wait_quiet(timeout: float = 120.0) -> None:
    """Wait until every descendant (adopted supervisors, agents) has exited."""
    deadline = time.monotonic() + timeout
    me = psutil.Process()
    while time.monotonic() < deadline:
        reap()
        kids = []
        try:
            children = me.children(recursive=True)
        except psutil.Error:
            children = [None]  # transient (a process vanished mid-walk): look again
        for kid in children:
            try:
                if kid is None or kid.status() != psutil.STATUS_ZOMBIE:
                    kids.append(kid)
            except psutil.NoSuchProcess:
                pass
            except psutil.Error:
                kids.append(kid)
        if not kids:
            reap()
            return
        time.sleep(0.01)
    raise RuntimeError(f"descendants still running after {timeout:.0f}s")


def timed(cmd: list[str], env: dict[str, str] | None = None, ok: tuple[int, ...] = (0,),
          **kw: Any) -> float:
    """Wall seconds of one command, start to exit."""
    kw.setdefault("stdout", subprocess.DEVNULL)
    kw.setdefault("stderr", subprocess.PIPE)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, **kw)
    elapsed = time.perf_counter() - t0
    if proc.returncode not in ok:
        err = proc.stderr.decode(errors="replace") if isinstance(proc.stderr, bytes) else ""
        raise RuntimeError(f"{cmd!r} exited {proc.returncode}: {err.strip()[:500]}")
    return elapsed


def check(cmd: list[str], env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd!r} exited {proc.returncode}: {proc.stderr.strip()[:500]}")
    return proc.stdout


# -- reporting ---------------------------------------------------------------


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def spread(xs: list[float]) -> str:
    """min/median/max in ms, for the eye."""
    return f"min {min(xs) * 1e3:.1f} / med {median(xs) * 1e3:.1f} / max {max(xs) * 1e3:.1f} ms"


def revision() -> str:
    """The loopctl source measured: git commit, and whether loopctl/ had
    uncommitted edits (the package is installed editable)."""
    src = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "loopctl"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (rev or "unknown") + (" + uncommitted loopctl/ edits" if dirty else "")


def header(title: str) -> None:
    print(f"== {title}")
    print(f"   {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs, loopctl = {LOOPCTL} @ {revision()}", flush=True)


def result(name: str, figure: str, goal: str, met: bool, **details: Any) -> None:
    print(f"-> {name}: {figure}  (goal {goal})  {'MET' if met else 'MISSED'}", flush=True)
    payload = {"name": name, "figure": figure, "goal": goal, "met": met, **details}
    print("BENCH-RESULT " + json.dumps(payload), flush=True)
