"""The concurrency cap (DESIGN §18): its setting, the fair queue, and the
count of what is in flight. Pure rules on a fake clock first; the drivers
with real processes at the end of the file."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

import pytest
from fixed_zone import UTC, zone_of

from conftest import CLI, agent_command, wait_for
from loopctl.domain import capacity, lifecycle
from loopctl.domain.errors import UsageError
from loopctl.domain.model import parse_loop
from loopctl.domain.state import LoopState, RunResult, display_status, new_loop_state
from loopctl.domain.timestamps import parse_iso

T0 = 1_800_000_000.0


# -- the setting -------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 1, 4, 1000, 4.0])
def test_a_whole_number_from_0_to_the_limit_is_a_cap(value: Any) -> None:
    assert capacity.check_caps({"max_concurrent": value}).total == int(value)


def test_no_setting_is_the_measured_default() -> None:
    caps = capacity.check_caps({})
    assert caps == capacity.Caps(capacity.DEFAULT_MAX_CONCURRENT, {})
    assert "the default" in caps.describe()


@pytest.mark.parametrize("value", [-1, "1e9", 1e9, "four", math.nan, math.inf, True, 1001,
                                   10**30, 2.5, [4], {"n": 4}, "4"])
def test_a_bad_cap_is_refused_naming_the_key(value: Any) -> None:
    with pytest.raises(UsageError) as caught:
        capacity.check_caps({"max_concurrent": value})
    assert "'max_concurrent'" in caught.value.message
    assert "\n" not in caught.value.message


@pytest.mark.parametrize("value, words", [
    ({"claude": -1}, "'max_concurrent_per_agent.claude'"),
    ({"claude": math.nan}, "'max_concurrent_per_agent.claude'"),
    ({"claud": 2}, "not an agent preset"),
    ({"../x\u202e": 2}, "not an agent preset"),
    ([2], "must be a mapping"),
    ("claude: 2", "must be a mapping"),
    (3, "must be a mapping"),
])
def test_a_bad_per_agent_cap_is_refused_naming_the_key(value: Any, words: str) -> None:
    with pytest.raises(UsageError) as caught:
        capacity.check_caps({"max_concurrent_per_agent": value})
    assert "max_concurrent_per_agent" in caught.value.message
    assert words in caught.value.message


# -- the fair queue ------------------------------------------------------------


class World:
    """Loops and their state, with supervisors that are alive until told."""

    def __init__(self, caps: capacity.Caps, **agents: str | None) -> None:
        self.caps = caps
        self.loops = {name: parse_loop(name, {"prompt": "p", "every": "1h",
                                             **({"agent": a} if a else {"command": "true"})})
                      for name, a in agents.items()}
        self.state: dict[str, Any] = {"loops": {}}
        self.dead: set[int] = set()
        self.pids = iter(range(100, 10_000))
        lifecycle.reconcile(self.loops, {}, self.state, T0, zones=zone_of)

    def alive(self, ref: Any) -> bool:
        return bool(ref) and ref["pid"] not in self.dead

    def due(self, name: str, at: float) -> None:
        self.state["loops"][name].next_due = at

    def plan(self, now: float) -> lifecycle.Pass:
        result = lifecycle.plan(self.loops, {}, self.state, now, self.alive, caps=self.caps,
                                zones=zone_of)
        for _, run in result.fired:  # what the driver does before releasing the lock
            run["spec"] = {"agent": self.loops[run_loop(self, run)].agent}
            run["supervisor"] = {"pid": next(self.pids), "ct": 1.0}
        return result

    def finish(self, name: str, now: float) -> None:
        st = self.state["loops"][name]
        lifecycle.settle(self.loops[name], st, RunResult("ok", 0, now - 1, now), now, zone=UTC)

    def st(self, name: str) -> LoopState:
        return self.state["loops"][name]  # type: ignore[no-any-return]


def run_loop(world: World, run: dict[str, Any]) -> str:
    return next(n for n, st in world.state["loops"].items() if st.run is run)


def names(result: lifecycle.Pass) -> list[str]:
    return [name for name, _ in result.fired]


def test_beyond_the_cap_the_oldest_due_fire_first_and_the_rest_queue() -> None:
    w = World(capacity.Caps(2), a="shell", b="shell", c="shell", d="shell", e="shell")
    for name, age in (("a", 10), ("b", 50), ("c", 30), ("d", 40), ("e", 20)):
        w.due(name, T0 - age)
    first = w.plan(T0)
    assert names(first) == ["b", "d"]
    assert sorted(n for n, _ in first.queued) == ["a", "c", "e"]
    assert {display_status(w.st(n)) for n in "ace"} == {"queued"}
    assert all(w.st(n).queued_at == T0 for n in "ace")
    # Nothing frees: a later pass starts nothing and keeps the queue's times.
    assert names(w.plan(T0 + 5)) == []
    assert w.st("a").queued_at == T0
    w.finish("d", T0 + 20)
    second = w.plan(T0 + 21)
    assert names(second) == ["c"]  # the oldest of those waiting
    assert second.fired[0][1]["queued_s"] == 21.0
    assert w.st("c").queued_at is None and display_status(w.st("c")) == "running"
    # Each queued loop waits as one fire: the queue never holds it twice.
    assert sorted(n for n, _ in second.queued) == ["a", "e"]


def test_a_run_without_a_wait_has_no_queued_s() -> None:
    w = World(capacity.Caps(2), a="shell")
    w.due("a", T0)
    [(_, run)] = w.plan(T0).fired
    assert "queued_s" not in run


def test_zero_is_unlimited() -> None:
    w = World(capacity.Caps(0), **{f"l{i}": "shell" for i in range(30)})
    for i in range(30):
        w.due(f"l{i}", T0 - i)
    assert len(w.plan(T0).fired) == 30


def test_a_preset_at_its_own_cap_does_not_hold_back_the_others() -> None:
    w = World(capacity.Caps(3, {"claude": 1}), c1="claude", c2="claude", s1="shell",
              cmd=None)
    for i, name in enumerate(("c1", "c2", "s1", "cmd")):
        w.due(name, T0 - 40 + i)
    result = w.plan(T0)
    assert names(result) == ["c1", "s1", "cmd"]
    assert [n for n, _ in result.queued] == ["c2"]
    w.finish("s1", T0 + 1)
    assert names(w.plan(T0 + 2)) == []  # a free slot, but not for claude
    w.finish("c1", T0 + 3)
    assert names(w.plan(T0 + 4)) == ["c2"]


def test_a_crashed_run_frees_its_slot_in_the_pass_that_finds_it_lost() -> None:
    w = World(capacity.Caps(1), a="shell", b="shell")
    w.due("a", T0 - 2)
    w.due("b", T0 - 1)
    assert names(w.plan(T0)) == ["a"]
    w.dead.add(w.st("a").run["supervisor"]["pid"])  # kill -9 of its supervisor
    result = w.plan(T0 + 60)
    assert [n for n, _ in result.lost] == ["a"]
    assert names(result) == ["b"]


def test_run_by_hand_does_not_count_a_dead_supervisor_of_another_loop() -> None:
    """`run NAME` plans only its loop: the others' lost runs are not yet
    recorded, and must not hold a slot meanwhile."""
    w = World(capacity.Caps(1), a="shell", b="shell")
    w.due("a", T0 - 2)
    w.due("b", T0 + 3600)
    assert names(w.plan(T0)) == ["a"]
    w.dead.add(w.st("a").run["supervisor"]["pid"])
    w.due("b", T0 + 5)
    result = lifecycle.plan(w.loops, {}, w.state, T0 + 10, w.alive, only="b", caps=w.caps,
                            zones=zone_of)
    assert names(result) == ["b"] and result.lost == []


def test_an_orphaned_agent_still_running_holds_a_slot() -> None:
    w = World(capacity.Caps(1), a="shell", b="shell")
    w.st("a").orphan = {"pid": 7, "ct": 1.0}
    w.due("a", T0 + 3600)
    w.due("b", T0)
    assert names(w.plan(T0)) == []
    w.dead.add(7)
    assert names(w.plan(T0 + 1)) == ["b"]


def test_a_queued_loop_that_is_paused_leaves_the_queue() -> None:
    w = World(capacity.Caps(1), a="shell", b="shell")
    w.due("a", T0 - 2)
    w.due("b", T0 - 1)
    w.plan(T0)
    assert w.st("b").queued_at == T0
    w.st("b").pause(T0 + 1)
    w.plan(T0 + 2)
    assert w.st("b").queued_at is None


def test_the_run_counts_under_the_preset_it_was_claimed_with() -> None:
    """An edit to a running loop's agent does not move its slot."""
    loop = parse_loop("x", {"prompt": "p", "every": "1h", "agent": "codex"})
    st = new_loop_state(loop, T0, zone=UTC)
    st.run = {"supervisor": {"pid": 1}, "spec": {"agent": "claude"}}
    busy = capacity.in_flight({"x": st}, {"x": loop}, lambda ref: True)
    assert (busy[capacity.ALL], busy["claude"], busy["codex"]) == (1, 1, 0)


def test_a_daemon_sleeps_past_a_queue_only_while_something_runs() -> None:
    """Queued loops wait for a run to settle (a file change, a SIGCHLD);
    with nothing in flight, as when the agent of a lost run that held the
    slot was killed after the pass, they are due at once, not stranded."""
    from loopctl.engine.firing import fireable_wake
    from loopctl.storage.definitions import Definitions

    w = World(capacity.Caps(1), a="shell", b="shell")
    w.due("a", T0 - 2)
    w.due("b", T0 - 1)
    w.plan(T0)
    defs = Definitions(loops=w.loops)
    assert fireable_wake(defs, w.state) is None  # b waits for a to settle
    w.st("a").run = None  # a ended, its state not yet re-planned
    assert fireable_wake(defs, w.state) == T0 - 1


def test_damaged_queued_values_in_state_are_repaired() -> None:
    from loopctl.domain.state import repair

    loop = parse_loop("x", {"prompt": "p", "every": "1h"})
    st = dict(vars(new_loop_state(loop, T0, zone=UTC)), queued_at="soon")
    clean, bad = repair("x", st)
    assert bad == ["queued_at"] and clean.queued_at is None
    st = dict(vars(new_loop_state(loop, T0, zone=UTC)), queued_at=None,
              run={"run_id": "20260101T000000Z-0001", "iteration": 1, "due_at": T0,
                   "queued_s": math.nan})
    assert repair("x", st)[1] == ["run"]


# -- loops.yaml, doctor, validate ----------------------------------------------


def write_top(cli: CLI, text: str) -> Path:
    path = cli.home / "loops.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    body = path.read_text() if path.exists() else "version: 1\nloops: {}\n"
    path.write_text(text + body)
    return path


@pytest.mark.parametrize("top", [
    "max_concurrent: -1\n", "max_concurrent: 1e9\n", "max_concurrent: \"four\"\n",
    "max_concurrent: .nan\n", "max_concurrent: 99999999999999999999999\n",
    "max_concurrent_per_agent: {claud: 1}\n", "max_concurrent_per_agent: 2\n",
])
def test_a_cap_that_cannot_be_read_fires_nothing(cli: CLI, top: str) -> None:
    cli("start", "p", "--name", "due", "--every", "1h", "--command", agent_command(), check=0)
    path = write_top(cli, top)
    before = path.read_bytes()
    proc = cli("tick")
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    key = top.split(":")[0]
    [message] = proc.stderr.strip().splitlines()
    assert f"'{key}" in message and "line 1" in message, message
    assert cli.records("due") == []
    assert cli("validate").returncode == 3
    doctor = cli("doctor", "--json")
    assert doctor.returncode != 0 and key in doctor.stdout
    assert path.read_bytes() == before  # nothing rewrote it


def test_an_int_too_long_for_python_is_one_short_line(cli: CLI) -> None:
    """5,000 digits: Python refuses to read the int (its 4,300-digit limit),
    so the YAML reader stops at the line, before any key is checked."""
    write_top(cli, "max_concurrent: " + "9" * 5000 + "\n")
    proc = cli("tick")
    [message] = proc.stderr.strip().splitlines()
    assert proc.returncode == 3 and "line 1" in message and len(message) < 300, message


def test_doctor_and_validate_show_the_caps(cli: CLI) -> None:
    cli("start", "p", "--name", "x", "--every", "1h", "--after", "1h", "--command",
        agent_command(), check=0)
    assert cli.json("validate")["max_concurrent"] == capacity.DEFAULT_MAX_CONCURRENT
    write_top(cli, "max_concurrent: 2\nmax_concurrent_per_agent: {claude: 1}\n")
    valid = cli.json("validate")
    assert (valid["max_concurrent"], valid["max_concurrent_per_agent"]) == (2, {"claude": 1})
    assert "max_concurrent 2; per agent claude 1" in cli("validate").stdout
    doctor = json.loads(cli("doctor", "--json").stdout)
    [finding] = [f for f in doctor["findings"] if f["check"] == "capacity"]
    assert finding["message"].startswith("max_concurrent 2; per agent claude 1; 0 run(s) "
                                         "in flight, none queued"), finding
    # `start` appends to the file and keeps the caps as written.
    cli("start", "p", "--name", "y", "--every", "1h", "--after", "1h", "--command",
        agent_command(), check=0)
    assert cli.json("validate")["max_concurrent"] == 2


# -- drivers, with real processes ---------------------------------------------


def gated_command(gate: Path, starts: Path) -> str:
    """An agent that notes its start and end (one line each in `starts`)
    and waits for `gate`: the test decides how long runs overlap."""
    script = ('echo "start $(date +%s.%N)" >> "$2"; while [ ! -e "$1" ]; do sleep 0.05; '
              'done; echo "end $(date +%s.%N)" >> "$2"')
    import shlex

    return shlex.join(["sh", "-c", script, "agent", str(gate), str(starts)])


def most_at_once(starts: Path) -> int:
    events = []
    for row in starts.read_text().splitlines():
        kind, at = row.split()
        events.append((float(at), 1 if kind == "start" else -1))
    level = peak = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):
        level += step
        peak = max(peak, level)
    return peak


@pytest.mark.slow
def test_twenty_ticks_under_a_cap_start_each_loop_once_and_never_more_than_the_cap(
        cli: CLI, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    gate, starts = tmp_path / "gate", tmp_path / "starts"
    request.addfinalizer(gate.touch)  # a failing assertion leaves no agent waiting
    for i in range(8):
        cli("start", "p", "--name", f"l{i}", "--every", "1h", "--command",
            gated_command(gate, starts), check=0)
    write_top(cli, "max_concurrent: 3\n")
    ticks = [cli.popen("tick", "--quiet", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for _ in range(20)]
    assert [t.wait(timeout=120) for t in ticks] == [0] * 20
    state = cli.state()["loops"]
    running = sorted(n for n, st in state.items() if st["run"])
    queued = sorted(n for n, st in state.items() if st["queued_at"] is not None)
    assert len(running) == 3 and len(queued) == 5 and not set(running) & set(queued)
    listed = {row["name"]: row["status"] for row in cli.json("ls")["loops"]}
    assert sorted(n for n, s in listed.items() if s == "queued") == queued
    assert cli.json("status", queued[0])["queued_since"] is not None
    assert "next fire  when a slot frees (slot " in cli("status", queued[0]).stdout
    table = cli("ls").stdout
    places = sorted(row.split("slot ")[1].split()[0] for row in table.splitlines()
                    if row.split()[:1] and row.split()[0] in queued and "queued" in row)
    assert places == [f"{n}/5" for n in range(1, 6)], table  # each its own place
    [capacity_finding] = [f for f in json.loads(cli("doctor", "--json").stdout)["findings"]
                          if f["check"] == "capacity"]
    assert "3 run(s) in flight; 5 queued" in capacity_finding["message"]
    report = cli.json("tick")
    assert sorted(q["loop"] for q in report["queued"]) == queued and report["fired"] == []
    plain = cli("tick").stdout.splitlines()
    assert sorted(row.split()[1] for row in plain if row.startswith("queued ")) == queued
    gate.touch()
    # Tick until every loop has run; each tick starts at most what is free.
    wait_for(lambda: cli("tick", "--quiet") and all(
        len(cli.records(f"l{i}")) == 1 for i in range(8)), timeout=120)
    wait_for(lambda: not any(st["run"] for st in cli.state()["loops"].values()))
    assert {n: st["iterations"] for n, st in cli.state()["loops"].items()} == \
        {f"l{i}": 1 for i in range(8)}
    assert most_at_once(starts) <= 3
    records = {f"l{i}": cli.records(f"l{i}")[0] for i in range(8)}
    assert all(r["outcome"] == "ok" for r in records.values())
    assert sorted(n for n, r in records.items() if r.get("queued_s") is not None) == queued
    # The oldest due started first: all eight were due at creation, in order.
    order = sorted(records, key=lambda n: parse_iso(records[n]["started_at"]))
    assert sorted(order[:3]) == running


@pytest.mark.slow
def test_a_daemon_starts_the_next_queued_loop_when_a_slot_frees(cli: CLI) -> None:
    for name in ("a", "b", "c"):
        cli("start", "p", "--name", name, "--every", "1h", "--command",
            agent_command("--sleep", "0.5"), check=0)
    write_top(cli, "max_concurrent: 1\n")
    daemon = cli.popen("daemon", stderr=subprocess.PIPE)
    try:
        wait_for(lambda: all(cli.records(n) for n in "abc"), timeout=90)
    finally:
        daemon.terminate()
        _, log = daemon.communicate(timeout=30)
    # Each wait is logged once, when it begins.
    assert [line.split("daemon: ")[1].split(":")[0] for line in log.splitlines()
            if "the concurrency cap is reached" in line] == ["queued b", "queued c"], log
    records = sorted((cli.records(n)[0] for n in "abc"), key=lambda r: r["started_at"])
    spans = [(parse_iso(r["started_at"]), parse_iso(r["ended_at"])) for r in records]
    assert all(spans[i][1] <= spans[i + 1][0] + 1 for i in range(2)), spans
    assert [r.get("queued_s") is not None for r in records] == [False, True, True]


def test_run_by_hand_waits_for_the_cap_unless_forced(cli: CLI, tmp_path: Path) -> None:
    gate, starts = tmp_path / "gate", tmp_path / "starts"
    cli("start", "p", "--name", "busy", "--every", "1h", "--command",
        gated_command(gate, starts), check=0)
    cli("start", "p", "--name", "other", "--every", "1h", "--after", "1h", "--command",
        agent_command(), check=0)
    write_top(cli, "max_concurrent: 1\n")
    try:
        assert [f["loop"] for f in cli.json("tick")["fired"]] == ["busy"]
        proc = cli("run", "other")
        assert proc.returncode == 75, (proc.stdout, proc.stderr)
        assert "1 of max_concurrent 1 runs are in flight" in proc.stderr
        assert "--force" in proc.stderr
        scheduled = cli("run", "other", "--scheduled")
        assert scheduled.returncode == 75 and "--force" not in scheduled.stderr
        assert cli.records("other") == []
        assert cli("run", "other", "--force").returncode == 0
        assert json.dumps(cli.records("other")[0]["outcome"]) == '"ok"'
    finally:
        gate.touch()
        wait_for(lambda: cli.records("busy"), timeout=60)


@pytest.mark.slow
def test_a_supervisor_killed_under_the_daemon_frees_its_slot(cli: CLI, tmp_path: Path) -> None:
    import os
    import signal

    gate, starts = tmp_path / "gate", tmp_path / "starts"
    cli("start", "p", "--name", "a", "--every", "1h", "--command",
        gated_command(gate, starts), check=0)
    cli("start", "p", "--name", "b", "--every", "1h", "--command", agent_command(), check=0)
    write_top(cli, "max_concurrent: 1\n")
    daemon = cli.popen("daemon", "--quiet", stderr=subprocess.DEVNULL)
    try:
        run = wait_for(lambda: (cli.state()["loops"]["a"]["run"] or {}).get("agent")
                       and cli.state()["loops"]["a"]["run"], timeout=60)
        assert cli.state()["loops"]["b"]["queued_at"] is not None
        os.kill(run["supervisor"]["pid"], signal.SIGKILL)
        wait_for(lambda: cli.records("b"), timeout=60)
    finally:
        gate.touch()
        daemon.terminate()
        daemon.wait(timeout=30)
    assert cli.records("a")[0]["outcome"] == "lost"
    assert cli.records("b")[0]["outcome"] == "ok" and cli.records("b")[0]["queued_s"] > 0
