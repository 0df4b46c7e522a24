"""Real run records, made by real `loopctl` processes, for the byte-for-byte
check of the run record's JSON (tests/engine/test_run_record_bytes.py).

`python -m tests.run_record_scenarios HOME` runs each scenario under
LOOPCTL_HOME=HOME (HOME/home as HOME) with the python it is run by, and
prints every record file it left: its loop, then its bytes with what differs
from one run to the next (times, durations, run ids, the home's path, pids)
replaced by placeholders and nothing else touched, so that key order,
spacing and every value loopctl chose are compared. Run by an older
loopctl's python (PYTHONPATH at its checkout), it gives what that version
wrote: the golden file tests/samples/run_records.txt was made so from main.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

FAKE_AGENT = Path(__file__).with_name("fake_agent.py")
# Times (ISO and run ids), durations and pids differ per run; nothing else may.
VARYING = [(re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"), b"<TIME>"),
           (re.compile(rb"\d{8}T\d{6}Z-\d{4}"), b"<RUN_ID>"),
           (re.compile(rb'"(duration_s|queued_s)": [0-9.e-]+'), rb'"\1": <SECONDS>'),
           (re.compile(rb"pid \d+"), b"pid <PID>")]


def agent(*args: str) -> str:
    return shlex.join([sys.executable, str(FAKE_AGENT), *args])


# name: (`start` options, how it is run: "run" or "lost")
SCENARIOS: dict[str, tuple[list[str], str]] = {
    "ok": (["--command", agent("--print", "hello", "--decide", "continue",
                               "--summary", "did one thing", "--exit", "0")], "run"),
    "failed": (["--command", agent("--stderr", "boom", "--exit", "3")], "run"),
    "checked": (["--command", agent("--exit", "0"), "--check", "sh -c 'echo 2 red; exit 1'",
                 "--if", "true"], "run"),
    "gated": (["--command", agent("--exit", "0"), "--if", "false"], "run"),
    "lost": (["--command", agent("--sleep", "60")], "lost"),
}


def loopctl(home: Path, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LOOPCTL_HOME=str(home), HOME=str(home / "home"), NO_COLOR="1")
    env.pop("LOOPCTL_DECISION_FILE", None)
    return subprocess.run([sys.executable, "-m", "loopctl", *args], env=env, text=True,
                          capture_output=True, timeout=120, check=check)


def run_all(home: Path) -> None:
    (home / "home").mkdir(parents=True, exist_ok=True)
    for name, (options, how) in SCENARIOS.items():
        loopctl(home, "start", "work", "--name", name, "--every", "1h", "--cwd", str(home),
                *options, check=True)
        if how == "lost":
            _record_lost(home, name)
        else:
            loopctl(home, "run", name)  # its exit code is the scenario's, not checked


def _record_lost(home: Path, name: str) -> None:
    """The supervisor of a run killed once its agent runs (the agent dies
    with it, DESIGN §14); then a `tick` finds the run lost and records it."""
    env = dict(os.environ, LOOPCTL_HOME=str(home), HOME=str(home / "home"), NO_COLOR="1")
    running = subprocess.Popen([sys.executable, "-m", "loopctl", "run", name], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _until(lambda: _agent_started(home, name), name)
    running.kill()
    running.wait()
    runs = home / "state" / "runs" / name
    _until(lambda: loopctl(home, "tick").returncode >= 0 and any(runs.glob("*.json")), name)


def _agent_started(home: Path, name: str) -> bool:
    try:
        state = json.loads((home / "state" / "state.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(((state["loops"].get(name) or {}).get("run") or {}).get("agent"))


def _until(ready: Callable[[], bool], name: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            raise SystemExit(f"{name}: nothing happened within {seconds:g} s")
        time.sleep(0.05)


def normalized(home: Path) -> bytes:
    out = []
    for name in SCENARIOS:
        for path in sorted((home / "state" / "runs" / name).glob("*.json")):
            data = path.read_bytes().replace(str(home).encode(), b"<HOME>")
            data = data.replace(str(FAKE_AGENT).encode(), b"<AGENT>")
            data = data.replace(sys.executable.encode(), b"<PYTHON>")
            for pattern, placeholder in VARYING:
                data = pattern.sub(placeholder, data)
            out.append(b"== " + name.encode() + b"\n" + data.rstrip(b"\n") + b"\n")
    return b"".join(out)


if __name__ == "__main__":
    target = Path(sys.argv[1])
    run_all(target)
    sys.stdout.buffer.write(normalized(target))
