"""Several homes playing several machines on one team store: each its own
LOOPCTL_HOME, HOME and LOOPCTL_MACHINE, every command a real process."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HOURLY = """\
version: 1
store: {dsn}
loops:
  hourly:
    prompt: {prompt}
    agent: shell
    cron: 0 * * * *
    cwd: {cwd}
    timeout: 1m
    max_runs: 1000
    for: 30d
    created_at: '{created}'
{extra}"""


# Each machine's processes in a pid namespace of their own, so pids collide
# as they do across machines (a pid recorded in one home means nothing in
# another's).
# --kill-child: the namespace's init dies with unshare (even by SIGKILL), and
# the kernel kills the rest of the namespace: a killed machine leaks nothing.
OWN_PIDS = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGKILL"]


@dataclass
class Machine:
    name: str
    home: Path
    own_pids: bool = False

    def env(self) -> dict[str, str]:
        user = self.home / "user"
        user.mkdir(parents=True, exist_ok=True)
        return dict(os.environ, LOOPCTL_HOME=str(self.home / "loopctl"), HOME=str(user),
                    XDG_CONFIG_HOME=str(user / ".config"),
                    XDG_STATE_HOME=str(user / ".local" / "state"),
                    LOOPCTL_MACHINE=self.name, NO_COLOR="1")

    def define(self, text: str) -> None:
        folder = self.home / "loopctl"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "loops.yaml").write_text(text)

    def argv(self, *args: str) -> list[str]:
        command = [sys.executable, "-m", "loopctl", *args]
        return [*OWN_PIDS, *command] if self.own_pids else command

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), capture_output=True, text=True,
                              env=self.env(), timeout=timeout)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self.argv(*args), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=self.env())


def machines(root: Path, count: int, own_pids: bool = False) -> list[Machine]:
    return [Machine(f"m{i + 1}", root / f"m{i + 1}", own_pids) for i in range(count)]


def hourly(dsn: str, cwd: Path, prompt: str, extra: str = "") -> str:
    """An hourly loop started a day ago: its last hours are slots to serve."""
    import json
    import time

    from loopctl.domain.timestamps import iso

    created = iso((int(time.time()) // 86400 - 1) * 86400)
    return HOURLY.format(dsn=dsn, cwd=cwd, prompt=json.dumps(prompt), created=created,
                         extra=extra)
