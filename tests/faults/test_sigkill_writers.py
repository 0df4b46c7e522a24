"""Fault 11: SIGKILL of any writer at a random point, 200 times.

tests/storage/test_store_durability.py (test_sigkill_never_leaves_a_half_written_file) kills 30
`start`/`update` processes one at a time. Here every kind of writer is
killed, several at once: `start`, `update`, `pause`, `resume`, `tick`, `rm`,
and supervisors settling their runs. After every round both files parse, and
no loop whose command completed is lost; at the end the home is fully usable.
"""

from __future__ import annotations

import json
import random
import signal
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from conftest import CLI, loopctl_argv, wait_for
from loopctl.storage.statefile import read_state_file

from .support import supervisors

KILLS = 200
AT_ONCE = 4
KINDS = ["start", "start", "update", "pause", "resume", "tick", "tick", "rm", "supervisor",
         "supervisor"]
HOT = "hot"  # always due: ticks keep starting supervisors to kill


def read_files(home: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    doc = yaml.safe_load((home / "loops.yaml").read_text())
    assert doc["version"] == 1 and isinstance(doc["loops"], dict), doc
    raw = json.loads((home / "state" / "state.json").read_text())
    assert raw["version"] == 2 and isinstance(raw["loops"], dict), raw
    state = read_state_file(home / "state" / "state.json")  # the left-out fields filled in
    return {str(k): v for k, v in doc["loops"].items()}, state


class Writers:
    """Launches writers, kills each after a random delay, tracks what must
    survive."""

    def __init__(self, cli: CLI, rng: random.Random) -> None:
        self.cli = cli
        self.rng = rng
        self.committed: dict[str, set[int]] = {}  # name -> max_runs values it may hold
        self.in_state: set[str] = set()  # starts that completed: in state.json too
        self.maybe_new: dict[str, int] = {}
        self.maybe_gone: set[str] = set()
        self.durations: dict[str, list[float]] = {}  # by command
        self.outcomes = {"completed": 0, "killed": 0}
        self.killed_starts = {"landed": 0, "not landed": 0}
        self.serial = 0

    def window(self, command: str) -> float:
        """How long this command takes here, lately (start-up dominates it;
        a tick with nothing due takes its fast path)."""
        recent = self.durations.get(command, [])[-15:]
        return statistics.median(recent) if recent else 0.4

    def plan(self) -> list[tuple[str, str | None, list[str], int]]:
        busy: set[str] = set()
        batch = []
        for _ in range(AT_ONCE):
            kind = self.rng.choice(KINDS)
            targets = sorted(n for n in self.committed if n not in busy)
            if kind in ("pause", "resume", "rm"):
                targets = [n for n in targets if n != HOT]
            if kind in ("update", "pause", "resume", "rm") and not targets:
                kind = "start"
            self.serial += 1
            value = 100 + self.serial
            target: str | None = None
            if kind == "start":
                target = f"k{self.serial:03d}"
                # Not due for an hour: the supervisors to kill are the hot
                # loop's, and the machine is not flooded with runs.
                argv = ["start", f"objective {self.serial}", "--name", target, "--every",
                        "10s", "--after", "1h", "--max-runs", str(value), "--command", "true"]
            elif kind in ("update", "pause", "resume", "rm"):
                target = self.rng.choice(targets)
                argv = [kind, target] + (["--max-runs", str(value)] if kind == "update" else [])
            else:
                argv = ["tick", "--quiet"]
            if target:
                busy.add(target)
            batch.append((kind, target, argv, value))
        return batch

    def round(self) -> list[str]:
        batch = self.plan()
        begin = time.monotonic()
        procs = []
        for kind, target, argv, value in batch:
            proc = subprocess.Popen(loopctl_argv(*argv), stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True)
            # From most of the way through the interpreter's start-up to a
            # little after the end: kills land before, during and after the
            # writes. (The tick of a "supervisor" step is not killed.)
            kill_at = begin + self.window(argv[0]) * self.rng.uniform(0.4, 1.3)
            procs.append((kind, target, argv, value, proc,
                          None if kind == "supervisor" else kill_at))
        ended: dict[int, float] = {}
        while len(ended) < len(procs):
            now = time.monotonic()
            for _, _, _, _, proc, kill_at in procs:
                if proc.pid in ended:
                    continue
                if proc.poll() is not None:
                    ended[proc.pid] = now
                elif kill_at is not None and now >= kill_at:
                    proc.send_signal(signal.SIGKILL)
            time.sleep(0.005)
        lines = []
        victims: list[tuple[psutil.Process, float]] = []
        for kind, target, argv, value, proc, _ in procs:
            _, stderr = proc.communicate()
            code = proc.returncode
            lines.append(f"{argv} -> {code} {stderr.strip()[:200]}")
            if code == 0:
                self.durations.setdefault(argv[0], []).append(ended[proc.pid] - begin)
            if kind == "supervisor":
                # The tick ran to completion; now kill one of the supervisors
                # it (or anyone) started, at a random point of its life.
                assert code == 0, lines[-1]
                found = supervisors(self.cli.home)
                if found:
                    victims.append((self.rng.choice(found), self.rng.uniform(0, 0.4)))
                else:
                    self.outcomes["completed"] += 1
                continue
            self.account(kind, target, value, code, lines[-1])
        for victim, delay in victims:
            time.sleep(delay)  # a random moment of its run to kill it at: the behaviour under test
            try:
                victim.send_signal(signal.SIGKILL)
                self.outcomes["killed"] += 1
            except psutil.NoSuchProcess:
                self.outcomes["completed"] += 1
        return lines

    def account(self, kind: str, target: str | None, value: int, code: int,
                line: str) -> None:
        killed = code == -signal.SIGKILL
        self.outcomes["killed" if killed else "completed"] += 1
        allowed = {"rm": (0, 75, -signal.SIGKILL)}.get(kind, (0, -signal.SIGKILL))
        assert code in allowed, line
        assert target is not None or kind == "tick", line
        if kind == "start":
            if killed:
                self.maybe_new[target] = value  # type: ignore[index]
            else:
                self.committed[target] = {value}  # type: ignore[index]
                self.in_state.add(target)  # type: ignore[arg-type]
        elif kind == "update":
            if killed:
                self.committed[target].add(value)  # type: ignore[index]
            else:
                self.committed[target] = {value}  # type: ignore[index]
        elif kind == "rm" and code != 75:
            self.committed.pop(target)  # type: ignore[arg-type]
            self.in_state.discard(target)  # type: ignore[arg-type]
            if killed:
                self.maybe_gone.add(target)  # type: ignore[arg-type]

    def check(self, context: Any) -> None:
        loops, state = read_files(self.cli.home)
        # A killed start landed whole or not at all; a killed rm removed the
        # loop or left it whole. Either way it is now known.
        for name, value in list(self.maybe_new.items()):
            if name in loops:
                assert loops[name]["max_runs"] == value, (context, loops[name])
                assert loops[name]["prompt"].startswith("objective"), (context, loops[name])
                self.committed[name] = {value}
            self.killed_starts["landed" if name in loops else "not landed"] += 1
            del self.maybe_new[name]
        for name in list(self.maybe_gone):
            if name in loops:
                self.committed[name] = {loops[name]["max_runs"]}
            self.maybe_gone.discard(name)
        for name, values in self.committed.items():
            assert name in loops, (context, f"{name} lost from loops.yaml")
            assert loops[name]["max_runs"] in values, (context, name, loops[name], values)
        for name in self.in_state:
            assert name in state["loops"], (context, f"{name} lost from state.json")


# Two independent homes of KILLS // 2 writers each rather than one of KILLS:
# the same number of kills, on two pytest-xdist workers at once.
@pytest.mark.slow
@pytest.mark.parametrize("part", [1, 2])
def test_sigkill_of_any_writer_loses_nothing_committed(cli: CLI, home: Path, part: int) -> None:
    seed = random.randrange(2**32)
    writers = Writers(cli, random.Random(seed))
    cli("start", "p", "--name", HOT, "--every", "1s", "--max-runs", "0",
        "--command", "sleep 0.3", check=0)
    for name in ("base-1", "base-2"):
        cli("start", "p", "--name", name, "--every", "10s", "--after", "1h",
            "--max-runs", "1000", "--command", "true", check=0)
    writers.committed = {HOT: {0}, "base-1": {1000}, "base-2": {1000}}
    writers.in_state = set(writers.committed)

    rounds = 0
    while writers.outcomes["killed"] + writers.outcomes["completed"] < KILLS // 2:
        lines = writers.round()
        rounds += 1
        writers.check((f"seed {seed}", f"round {rounds}", lines))
    print(f"seed {seed}: {rounds} rounds, {writers.outcomes}, killed starts "
          f"{writers.killed_starts}, start takes {writers.window('start'):.2f}s")
    assert writers.outcomes["killed"] >= 20, (seed, writers.outcomes)

    # Settle what is left; the next pass records the runs of killed supervisors.
    wait_for(lambda: not supervisors(home), timeout=60)
    cli("pause", HOT, check=0)
    cli("tick", check=0)
    wait_for(lambda: not supervisors(home), timeout=60)
    cli("tick", check=0)
    loops, state = read_files(home)
    assert set(writers.committed) <= set(loops), seed
    for name, st in state["loops"].items():
        assert not st["run"], (seed, name, st["run"])
    for record in home.glob("state/runs/*/*.json"):
        if not record.name.endswith(".decision.json"):
            json.loads(record.read_text())  # whole, never half-written
    # The home is fully usable.
    valid = json.loads(cli("validate", "--json", check=0).stdout)
    assert valid["valid"] == sorted(loops), seed
    listed = {loop["name"] for loop in cli.json("ls")["loops"]}
    assert listed == set(loops), seed
    cli("start", "p", "--name", "after", "--every", "1h", "--command", "true", check=0)
    cli("rm", "after", check=0)
