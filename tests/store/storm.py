"""A kill storm on a team store (issue 54, DESIGN §21 "Tested for real"):
three machines, each its own pid namespace, race drivers for the same loops
while a killer SIGKILLs their supervisors and drivers at random. Used by
tests/store/test_kill_storm.py (seconds) and bench/store_storm.py (minutes).

Every agent body appends marks to one shared file (O_APPEND: the file's
order is the timeline, whatever the machine): `start`, a `beat` every 0.1 s,
`end`, each with its loop, machine, pid (its namespace's) and uptime (the
kernel's monotonic clock, shared by the namespaces). A body killed with its
supervisor stops beating: its last mark bounds it.

`check` reads the store, every machine's run records and the marks, and
returns one line per broken property, naming the slot or run."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg

from store.machines import OWN_PIDS, Machine, machines

LOOPS = ("alpha", "beta")
LOOP = """\
  {name}:
    prompt: {prompt}
    agent: shell
    every: 1s
    cwd: {cwd}
    timeout: 1m
    max_runs: 100000
    max_failures: 0
"""
# ~1.5 s of beats, longer than a slot (1 s): kills land mid-body, and a body
# its supervisor's death failed to kill would still beat when the next
# slot's body starts (the slots between are skipped while a run is in
# flight). No failure limit: every lost run is a failure, and a paused loop
# would end the storm.
BODY = ("mark() {{ read up _ < /proc/uptime; "
        "echo \"$1 {loop} $LOOPCTL_MACHINE $$ $up $LOOPCTL_RUN_ID\" >> {marks}; }}; "
        "mark start; for i in $(seq 15); do mark beat; sleep 0.1; done; mark end")
DAEMON = "while :; do {py} -m loopctl daemon; sleep 0.2; done"
TICKS = "while :; do {py} -m loopctl tick; sleep 0.5; done"


def definition(dsn: str, cwd: Path, marks: Path) -> str:
    loops = "".join(LOOP.format(name=name, cwd=cwd,
                                prompt=json.dumps(BODY.format(loop=name, marks=marks)))
                    for name in LOOPS)
    return f"version: 1\nstore: {dsn}\nloops:\n{loops}"


@dataclass
class Storm:
    """Three machines' drivers and the killer's log of what it killed."""

    root: Path
    dsn: str
    group: list[Machine] = field(default_factory=list)
    drivers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    killed: list[str] = field(default_factory=list)  # "m2 supervisor alpha RUN" / "m1 tick"

    @property
    def marks(self) -> Path:
        return self.root / "marks"

    def setup(self) -> None:
        self.group = machines(self.root / "machines", 3, own_pids=True)
        for machine in self.group:
            machine.define(definition(self.dsn, self.root, self.marks))
        init = self.group[0].run("store", "init")
        assert init.returncode == 0, init.stderr

    def start(self) -> None:
        """m1 and m2 run daemons, m3 ticks: each as its namespace's
        processes under a shell loop that restarts a killed driver."""
        import sys

        for machine in self.group:
            script = (TICKS if machine.name == "m3" else DAEMON).format(py=sys.executable)
            log = open(self.root / f"{machine.name}.driver.log", "ab")  # noqa: SIM115
            self.drivers[machine.name] = subprocess.Popen(
                [*OWN_PIDS, "sh", "-c", script], stdout=log, stderr=log, env=machine.env())
            log.close()

    def rage(self, seconds: float, pace: tuple[float, float] = (0.8, 2.0),
             seed: int | None = None) -> None:
        """Every `pace` seconds for `seconds`, SIGKILL a random running
        supervisor (three times in four: waiting up to a second for one to
        be mid-body) or a random driver, of any machine."""
        rng = random.Random(seed)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(*pace))
            kind = "supervisor" if rng.random() < 0.75 else "driver"
            victims = self.all_victims(kind, patience=1.0)
            if victims:
                self.kill(*rng.choice(victims))

    def all_victims(self, kind: str, patience: float) -> list[tuple[int, str]]:
        until = time.monotonic() + patience
        while True:
            found = [(pid, f"{name} {label}") for name in sorted(self.drivers)
                     for pid, label in self.victims(name, kind)]
            if found or time.monotonic() > until:
                return found
            time.sleep(0.05)

    def kill(self, pid: int, label: str) -> None:
        try:
            os.kill(pid, signal.SIGKILL)
            self.killed.append(label)
        except ProcessLookupError:
            pass

    def victims(self, name: str, kind: str) -> list[tuple[int, str]]:
        """The machine's running supervisors (each the parent of an agent
        body; forked from its driver, its command line is the driver's)
        or its drivers (children of the namespace's shell loop)."""
        try:
            [shell] = psutil.Process(self.drivers[name].pid).children()
            procs = shell.children(recursive=True)
        except (psutil.Error, ValueError):
            return []
        found = []
        for proc in procs:
            try:
                argv = proc.cmdline()  # empty for a zombie
                if not argv:
                    continue
                if kind == "driver" and proc.ppid() == shell.pid and proc.name() != "sleep":
                    found.append((proc.pid, argv[-1]))
                elif kind == "supervisor" and "mark start" in " ".join(argv):
                    env = proc.environ()
                    found.append((proc.ppid(), f"supervisor of {env.get('LOOPCTL_LOOP', '?')} "
                                               f"{env.get('LOOPCTL_RUN_ID')}"))
            except psutil.Error:
                continue
        return found

    def stop(self) -> None:
        """Every machine dies at once (unshare killed, its namespace's init
        with it, and the kernel kills the rest)."""
        for proc in self.drivers.values():
            proc.kill()
            proc.wait(timeout=30)

    def settle(self, stale: float) -> None:
        """Once no claim is fresh (the store's clock), a pass on each machine
        records what was lost, and a second sends the records the first
        wrote to the store."""
        deadline = time.monotonic() + 10 * stale + 60
        while in_flight_claims(self.dsn, stale) and time.monotonic() < deadline:
            time.sleep(0.2)
        for machine in self.group:  # a pass that fires waits for its run
            done = machine.run("tick", "--wait", timeout=120)
            assert done.returncode == 0, done.stderr
        for machine in self.group:  # the last pass's records, sent by the next
            sent = machine.run("tick", "--wait", timeout=120)
            assert sent.returncode == 0, sent.stderr


def in_flight_claims(dsn: str, stale: float) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM loopctl.slot_claims WHERE lost_at IS NULL AND "
            "renewed_at > clock_timestamp() - make_interval(secs => %s)", (stale,)).fetchone()
    return bool(row and row[0])


@dataclass
class Mark:
    line: int
    kind: str
    loop: str
    machine: str
    pid: str
    uptime: str
    run_id: str


def read_marks(path: Path) -> list[Mark]:
    found = []
    for i, text in enumerate(path.read_text().splitlines() if path.exists() else []):
        parts = text.split()
        if len(parts) == 6:
            found.append(Mark(i, *parts))
    return found


def bodies(marks: list[Mark]) -> dict[tuple[str, str], list[Mark]]:
    """The marks of each body, by (loop, run id): a run id is one per fire,
    shared by the loops fired in it."""
    by_run: dict[tuple[str, str], list[Mark]] = defaultdict(list)
    for mark in marks:
        by_run[(mark.loop, mark.run_id)].append(mark)
    return by_run


def overlaps(marks: list[Mark]) -> list[str]:
    """Two bodies of one loop alive at once: the file's order is the
    timeline, a body spans its first to its last mark."""
    spans = defaultdict(list)
    for (loop, run_id), own in bodies(marks).items():
        spans[loop].append((own[0], own[-1], run_id))
    broken = []
    for loop, runs in spans.items():
        runs.sort(key=lambda span: span[0].line)
        for (_, last, a), (first, _, b) in zip(runs, runs[1:], strict=False):
            if first.line <= last.line:
                broken.append(f"loop {loop}: run {b} ({first.machine} pid {first.pid}) started "
                              f"at uptime {first.uptime} while run {a} ({last.machine} pid "
                              f"{last.pid}) still beat at {last.uptime}")
    return broken


def store_rows(dsn: str) -> tuple[list[tuple], list[tuple], dict[str, Any]]:
    with psycopg.connect(dsn) as conn:
        claims = conn.execute("SELECT loop, slot, run_id, machine, lost_at IS NOT NULL "
                              "FROM loopctl.slot_claims").fetchall()
        runs = conn.execute("SELECT loop, machine, run_id, record->>'outcome' "
                            "FROM loopctl.runs").fetchall()
        state = {r[0]: r[1] for r in conn.execute("SELECT loop, entry FROM loopctl.loop_state")}
    return claims, runs, state


def local_records(group: list[Machine]) -> list[tuple[str, str, dict[str, Any]]]:
    """(machine whose home holds it, loop, record) for every run record."""
    found = []
    for machine in group:
        for loop in LOOPS:
            folder = machine.home / "loopctl" / "state" / "runs" / loop
            for path in sorted(folder.glob("*.json")) if folder.exists() else []:
                found.append((machine.name, loop, json.loads(path.read_text())))
    return found


def check(storm: Storm) -> list[str]:
    """Every broken property, one line each, naming the slot or run."""
    claims, runs, state = store_rows(storm.dsn)
    marks = read_marks(storm.marks)
    return [*check_claims(claims, marks), *overlaps(marks),
            *check_records(claims, runs, local_records(storm.group)),
            *check_counters(claims, runs, state)]


def check_claims(claims: list[tuple], marks: list[Mark]) -> list[str]:
    """A claim's run is one body at most, and no body runs unclaimed."""
    broken = []
    by_run = {(row[0], row[2]): row for row in claims}
    for (loop, run_id), n in Counter((row[0], row[2]) for row in claims).items():
        if n > 1:
            broken.append(f"run {run_id} of {loop} holds {n} claims")
    starts = Counter((m.loop, m.run_id) for m in marks if m.kind == "start")
    for (loop, run_id), n in starts.items():
        if (loop, run_id) not in by_run:
            broken.append(f"run {run_id} of {loop}: a body started with no claim in the store")
        elif n > 1:
            where = [f"{m.machine} pid {m.pid}" for m in marks
                     if (m.loop, m.run_id) == (loop, run_id) and m.kind == "start"]
            broken.append(f"slot {by_run[(loop, run_id)][1]} of {loop} (run {run_id}): "
                          f"{n} bodies ({', '.join(where)})")
    return broken


def check_records(claims: list[tuple], runs: list[tuple],
                  local: list[tuple[str, str, dict[str, Any]]]) -> list[str]:
    """Each claim settled in the store by exactly one record; a lost claim by
    one `lost` record; nowhere two `lost` records of one run."""
    broken = []
    published = defaultdict(list)
    for loop, machine, run_id, outcome in runs:
        published[(loop, run_id)].append(f"{outcome}@{machine}")
    for loop, slot, run_id, machine, lost in claims:
        said = published.get((loop, run_id), [])
        if len(said) != 1:
            broken.append(f"slot {slot} of {loop} (run {run_id} on {machine}): "
                          f"{len(said)} records in the store {said}")
        elif lost and not said[0].startswith("lost@"):
            broken.append(f"slot {slot} of {loop} (run {run_id} on {machine}): claim marked "
                          f"lost but recorded {said[0]}")
    lost_where = defaultdict(list)
    for home, loop, record in local:
        if record.get("outcome") == "lost":
            lost_where[(loop, record.get("run_id"))].append(home)
    for (loop, run_id), homes in lost_where.items():
        if len(homes) > 1:
            broken.append(f"run {run_id} of {loop} recorded lost {len(homes)} times (in {homes})")
    return broken


def check_counters(claims: list[tuple], runs: list[tuple], state: dict[str, Any]) -> list[str]:
    broken = []
    for loop in LOOPS:
        entry = state.get(loop) or {}
        claimed = sum(1 for row in claims if row[0] == loop)
        recorded = sum(1 for row in runs if row[0] == loop)
        if entry.get("iterations") != claimed or claimed != recorded:
            broken.append(f"loop {loop}: iterations {entry.get('iterations')}, "
                          f"{claimed} claims, {recorded} runs recorded")
        tallied = (entry.get("tally") or {}).get("runs", {})
        outcomes = dict(Counter(row[3] for row in runs if row[0] == loop))
        if tallied != outcomes:
            broken.append(f"loop {loop}: its tally counts {tallied}, the store records {outcomes}")
        if entry.get("run"):
            broken.append(f"loop {loop}: run {entry['run'].get('run_id')} still in flight "
                          "after the team settled")
    return broken


def timed(label: str, times: dict[str, float], step: Any) -> None:
    start = time.monotonic()
    step()
    times[label] = round(time.monotonic() - start, 1)


def summary(storm: Storm) -> dict[str, Any]:
    """What the storm did, for the test's message and the bench."""
    claims, runs, _ = store_rows(storm.dsn)
    return {"claims": len(claims), "lost": sum(1 for row in claims if row[4]),
            "outcomes": dict(Counter(row[3] for row in runs)),
            "kills": dict(Counter(k.split()[1] for k in storm.killed)),
            "bodies": len(bodies(read_marks(storm.marks)))}
