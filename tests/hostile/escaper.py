"""A hostile agent for the sandbox tests (tests/engine/test_sandbox_hostile.py).

It tries every escape it is given and writes what happened to
`escape-report.json` in its working directory (its own work, which must
succeed), then records its decision with `loopctl decide` through the shim.

  HOSTILE_READ     os.pathsep-separated files to read (secrets)
  HOSTILE_WRITE    os.pathsep-separated files to append a line to
  HOSTILE_SIGNAL   comma-separated pids to send SIGTERM and whose
                   /proc/PID/environ to read (the supervisor is always
                   tried too: the parent, `kill -TERM $PPID`)
  HOSTILE_PID_FILE write this process's pid here and sleep until killed
                   (the "other run" a confined agent must not signal)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time


def attempt_read(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            handle.read(100)
    except OSError as exc:
        return f"denied: {exc.strerror}"
    return "ALLOWED"


def attempt_write(path: str) -> str:
    try:
        with open(path, "a") as handle:
            handle.write("ssh-ed25519 AAAA attacker\n")
    except OSError as exc:
        return f"denied: {exc.strerror}"
    return "ALLOWED"


def attempt_signal(pid: int) -> str:
    try:
        os.kill(pid, signal.SIGTERM)
    except OSError as exc:
        return f"denied: {exc.strerror}"
    return "ALLOWED"


def split(name: str, sep: str) -> list[str]:
    return [p for p in os.environ.get(name, "").split(sep) if p]


def main() -> int:
    pid_file = os.environ.get("HOSTILE_PID_FILE")
    if pid_file:
        with open(pid_file + ".tmp", "w") as handle:
            handle.write(str(os.getpid()))
        os.rename(pid_file + ".tmp", pid_file)
        time.sleep(120)
        return 0
    report: dict[str, str] = {}
    for path in split("HOSTILE_READ", os.pathsep):
        report["read " + path] = attempt_read(path)
    for path in split("HOSTILE_WRITE", os.pathsep):
        report["write " + path] = attempt_write(path)
    # Another process's environment (the daemon's holds every loop's keys)
    # and memory: the kernel's ptrace check, which Landlock scopes too.
    for pid in [str(os.getppid()), *split("HOSTILE_SIGNAL", ",")]:
        report[f"read /proc/{pid}/environ"] = attempt_read(f"/proc/{pid}/environ")
    report[f"signal supervisor {os.getppid()}"] = attempt_signal(os.getppid())
    for pid in split("HOSTILE_SIGNAL", ","):
        report[f"signal {pid}"] = attempt_signal(int(pid))
    report["tmpdir " + os.environ.get("TMPDIR", "-")] = attempt_write(
        os.path.join(os.environ.get("TMPDIR", "/nonexistent"), "scratch"))
    with open("escape-report.json", "w") as handle:
        json.dump(report, handle, indent=1)
    done = subprocess.run(["loopctl", "decide", "complete", "--summary", "tried everything",
                           "--evidence", "escape-report.json"], capture_output=True, text=True)
    print(done.stdout + done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
