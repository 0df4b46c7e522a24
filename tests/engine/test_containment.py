"""Bounds that hold with or without the sandbox (DESIGN §14), tried as a
hostile agent would, with real supervisors and the fake agent:

- an agent that SIGKILLs its supervisor: it dies with it, what it left is
  killed by the next driver before anything fires, the run is `lost` and
  counts toward --max-failures;
- a forker whose processes ignore SIGTERM, double-fork and call setsid:
  none is left once the run is recorded (with and without a cgroup);
- a flood past --max-log: the log is bounded, the run goes on, the log
  and the record say so;
- a symlink or FIFO planted as the run log: nothing written through it,
  nothing read back from it, nothing blocks;
- run-shaped files planted in the run folder: not shown, pruning unaffected.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from faults.support import gone, home_processes, in_flight
from process_support import kill_leftovers, pids_in

from conftest import CLI, agent_command, wait_for
from loopctl.engine import procs, reaper
from loopctl.engine.containment import cgroup

HAS_CGROUP = cgroup.base_cgroup()[0] is not None
CGROUP_MODES = [pytest.param({}, id="cgroup", marks=pytest.mark.skipif(
    not HAS_CGROUP, reason="no writable cgroup v2 here")),
    pytest.param({"LOOPCTL_CGROUP": "off"}, id="no-cgroup")]


@pytest.fixture(autouse=True)
def reap(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftovers(tmp_path)
    # Scrubbed ones carry no LOOPCTL_HOME; a failed test's forker may still fork.
    for _ in range(50):
        living = alive(pids_in(tmp_path / "pids"))
        if not living:
            break
        for pid in living:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        wait_for(lambda living=living: not alive(living), timeout=5)


@pytest.fixture
def no_landlock(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a kernel without Landlock: an unconfined agent can then signal
    its supervisor and write cgroup files (with Landlock it can do neither:
    tests/engine/test_cage_bounds.py), and the bounds below must still hold."""
    monkeypatch.setenv("LOOPCTL_SANDBOX_ABI", "0")


def alive(pids: list[int]) -> list[int]:
    return [p for p in pids if not gone(p)]


def start(cli: CLI, name: str, *agent_args: str, extra: tuple[str, ...] = (),
          env: dict[str, str] | None = None) -> None:
    cli("start", "p", "--name", name, "--every", "1s", *extra,
        "--command", agent_command(*agent_args), check=0, env=env)


# -- 1. an agent that kills its supervisor ------------------------------------------


def killed_supervisor(cli: CLI, name: str, go: Path) -> dict[str, Any]:
    """Let the agent kill its supervisor once the supervisor has recorded it
    (on a loaded machine a quick agent won the race and the test waited for
    a record that never came); the agent dies with its supervisor
    (PR_SET_PDEATHSIG)."""
    run = wait_for(lambda: in_flight(cli, name))
    go.touch()
    wait_for(lambda: gone(run["supervisor"]["pid"]))
    wait_for(lambda: not procs.alive(run["agent"]), timeout=5)
    go.unlink()
    return run


@pytest.mark.parametrize("scrub", [False, True], ids=["marked", "scrubbed-env"])
@pytest.mark.usefixtures("no_landlock")
def test_an_agent_that_kills_its_supervisor_at_once_leaves_nothing(
        cli: CLI, tmp_path: Path, scrub: bool) -> None:
    """The race the test below avoids on purpose: the agent kills its
    supervisor at once, often before the supervisor writes down its pid and
    its cgroup. The driver's claim still names the supervisor, so the next
    driver finds the run lost and kills the child the agent left: by its
    marker, or (environment scrubbed) by the run's cgroup, which it finds
    where it would have made it. PR_SET_PDEATHSIG ends only the agent."""
    if scrub and not HAS_CGROUP:
        pytest.skip("a scrubbed environment is found only through a cgroup")
    child = tmp_path / "child"
    sleeper = "env -i sleep 300" if scrub else "sleep 300"
    cli("start", "p", "--name", "quick", "--every", "1h", "--command",
        f"sh -c '{sleeper} & echo $! > {child}; kill -9 $PPID; wait'", check=0)
    cli("tick", check=0)
    run = wait_for(lambda: cli.state()["loops"]["quick"].get("run"))
    wait_for(lambda: gone(run["supervisor"]["pid"]))
    (pid,) = wait_for(lambda: pids_in(child))
    assert not gone(pid)
    report = cli.json("tick")
    assert report["lost"] == [run["run_id"]] and report["fired"] == []
    (record,) = cli.records("quick")
    assert record["outcome"] == "lost"
    assert gone(pid), "the agent's child outlived the lost run"
    assert not cli.state()["loops"]["quick"]["run"]
    if HAS_CGROUP:
        mark = reaper.run_mark(cli.state_dir, "quick", run["run_id"]).replace("/", ".")
        assert not os.path.exists(os.path.join(cgroup.base_cgroup()[0] or "",
                                               cgroup.CGROUP_PREFIX + mark))


@pytest.mark.parametrize("scrub", [False, True], ids=["marked", "scrubbed-env"])
@pytest.mark.usefixtures("no_landlock")
def test_an_agent_that_kills_its_supervisor_leaves_nothing_behind(
        cli: CLI, tmp_path: Path, scrub: bool) -> None:
    if scrub and not HAS_CGROUP:
        pytest.skip("a scrubbed environment is found only through a cgroup")
    pid_file = tmp_path / "pids"
    start(cli, "escapee", "--grandchild", "300", *(["--scrub-env"] if scrub else []),
          "--kill-parent", "--kill-when", str(tmp_path / "go"), "--sleep", "300",
          extra=("--env", f"FAKE_AGENT_PIDS={pid_file}", "--max-failures", "2",
                 "--timeout", "2s"))
    cli("tick", check=0)
    run = killed_supervisor(cli, "escapee", tmp_path / "go")
    (grandchild,) = wait_for(lambda: pids_in(pid_file))
    assert not gone(grandchild)  # orphaned to init: only the next driver can end it

    report = cli.json("tick")
    assert report["lost"] == [run["run_id"]] and report["fired"] == []
    assert gone(grandchild)  # killed by that driver before it returned
    (record,) = cli.records("escapee")
    assert record["outcome"] == "lost"
    assert "killed 1 process(es) it left" in record["note"], record
    assert not (cli.state_dir / "decisions" / "escapee" / run["run_id"]).exists()
    st = cli.state()["loops"]["escapee"]
    assert st["failures"] == 1 and st["orphan"] is None and st["status"] == "active"

    # The next fire: the same escape again reaches --max-failures 2.
    wait_for(lambda: cli.json("tick")["fired"], timeout=10, interval=0.25)
    run2 = killed_supervisor(cli, "escapee", tmp_path / "go")
    assert cli.json("tick")["lost"] == [run2["run_id"]]
    st = cli.state()["loops"]["escapee"]
    assert (st["status"], st["reason"], st["failures"]) == ("paused", "failure_limit", 2)
    assert alive(pids_in(pid_file)) == []


# -- 2. a forker ----------------------------------------------------------------------


@pytest.mark.parametrize("env", CGROUP_MODES)
def test_a_forker_that_ignores_sigterm_and_leaves_its_session_leaves_nothing(
        cli: CLI, tmp_path: Path, env: dict[str, str]) -> None:
    # Its environment scrubbed too: no marker to find it by; the cgroup, or
    # descent from the living supervisor (a subreaper), must do.
    scrub = True
    pid_file, gate = tmp_path / "pids", tmp_path / "gate"
    depth = 4  # 31 processes, each TERM-ignoring, double-forked, setsid
    start(cli, "hydra", "--hydra", str(depth), *(["--scrub-env"] if scrub else []),
          "--wait-for", str(gate), extra=("--env", f"FAKE_AGENT_PIDS={pid_file}"), env=env)
    cli("tick", check=0, env=env)
    wait_for(lambda: len(pids_in(pid_file)) >= 8)  # still growing when the agent exits
    gate.touch()
    (record,) = wait_for(lambda: cli.records("hydra"), timeout=30)
    assert record["outcome"] == "ok", record
    assert "leftover process(es)" in (record["note"] or ""), record
    # Recorded after the last one was gone: no waiting here.
    started = pids_in(pid_file)
    assert started and alive(started) == [], (len(started), alive(started))
    if env == {} and HAS_CGROUP:
        held = reaper.run_mark(cli.state_dir, "hydra", record["run_id"]).replace("/", ".")
        assert not os.path.exists(os.path.join(cgroup.base_cgroup()[0] or "",
                                               cgroup.CGROUP_PREFIX + held))


def test_the_agent_joins_its_runs_cgroup_and_carries_the_marker(cli: CLI, tmp_path: Path) -> None:
    if not HAS_CGROUP:
        pytest.skip("no writable cgroup v2 here")
    out = tmp_path / "seen"
    script = tmp_path / "look.sh"
    script.write_text(f"#!/bin/sh\ncat /proc/self/cgroup > {out}\n"
                      f"echo \"$LOOPCTL_RUN_MARK\" >> {out}\n")
    script.chmod(0o700)
    cli("start", "p", "--name", "member", "--every", "1h", "--command", str(script), check=0)
    cli("tick", "--wait", check=0)
    (record,) = cli.records("member")
    mark = reaper.run_mark(cli.state_dir, "member", record["run_id"])
    lines = out.read_text().splitlines()
    (v2,) = [line for line in lines if line.startswith("0::")]
    # The run's group, and in it the agent's leaf (the supervisor has one beside it).
    assert v2.endswith(f"/{cgroup.CGROUP_PREFIX}{mark.replace('/', '.')}"
                       f"/{cgroup.CGROUP_PREFIX}run"), lines
    assert lines[-1] == mark


# -- 3. a flood past --max-log -------------------------------------------------------


@pytest.mark.parametrize("driver", ["tick", "run"])
def test_a_flood_past_max_log_is_cut_and_the_run_goes_on(cli: CLI, driver: str) -> None:
    start(cli, "flood", "--flood", str(8 * 2**20), "--decide", "continue",
          "--summary", "after the flood", extra=("--max-log", "1MiB"))
    if driver == "tick":
        cli("tick", "--wait", check=0)
    else:
        cli("run", "flood", check=0)
    (record,) = cli.records("flood")
    # The agent went on past the cut: it decided after flooding.
    assert record["outcome"] == "ok" and record["log_truncated"] is True, record
    assert record["decision"]["summary"] == "after the flood"
    data = Path(record["log"]).read_bytes()
    agent_bytes = sum(len(line) for line in data.splitlines(keepends=True)
                      if not line.startswith(b"# loopctl:"))
    assert agent_bytes <= 2**20 + 1, agent_bytes  # +1: loopctl ends the cut line
    assert data.rstrip(b"\n").rsplit(b"\n", 1)[-1] == b"# loopctl: log truncated at 1MiB"
    assert cli.json("history", "flood")["runs"][0]["log_truncated"] is True


def test_output_under_max_log_is_kept_whole(cli: CLI) -> None:
    start(cli, "small", "--flood", str(2**20), extra=("--max-log", "1MiB"))
    cli("tick", "--wait", check=0)
    (record,) = cli.records("small")
    assert record["log_truncated"] is False
    assert b"truncated" not in Path(record["log"]).read_bytes()


# -- 4. a log replaced by the agent ---------------------------------------------------


def hook_that_says(path: Path) -> Path:
    path.write_text("#!/bin/sh\necho HOOK OUTPUT\n")
    path.chmod(0o700)
    return path


def deliveries_done(tmp_path: Path) -> bool:
    """No hook delivery process of this test is left (it appends to the
    log after the hook exits)."""
    for proc in home_processes(tmp_path):
        try:
            if "loopctl.engine.events" in " ".join(proc.cmdline()):
                return False
        except psutil.Error:  # gone meanwhile, or a zombie: done
            continue
    return True


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_a_link_planted_as_the_log_is_neither_read_back_nor_written_through(
        cli: CLI, tmp_path: Path, kind: str) -> None:
    # A hard link needs the same file system: the secret sits in the state
    # directory, as state.json does.
    secret = (cli.state_dir if kind == "hardlink" else tmp_path) / "netrc"
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_text("machine example.com password SECRET-TOKEN\n")
    before = secret.read_bytes()
    hook = hook_that_says(tmp_path / "hook.sh")
    # --max-runs 1: the run pauses the loop, an attention event runs the
    # hook, whose output is appended to the run's log.
    start(cli, "planter", "--print", "real output", "--plant-log", f"{kind}:{secret}",
          extra=("--max-runs", "1", "--on-attention", str(hook)))
    cli("tick", "--wait", check=0)
    (record,) = cli.records("planter")
    assert "SECRET" not in str(record), record
    assert record["result"] and "real output" in record["result"], record
    assert cli.state()["loops"]["planter"]["status"] == "paused"
    wait_for(lambda: deliveries_done(tmp_path))
    assert secret.read_bytes() == before  # the hook's lines went nowhere
    proc = cli("logs", "planter")
    assert "SECRET" not in proc.stdout + proc.stderr


def test_a_fifo_planted_as_the_log_blocks_nothing(cli: CLI, tmp_path: Path) -> None:
    hook = hook_that_says(tmp_path / "hook.sh")
    start(cli, "fifo", "--print", "out", "--plant-log", "fifo",
          extra=("--max-runs", "1", "--on-attention", str(hook)))
    cli("tick", "--wait", check=0, timeout=30)
    (record,) = cli.records("fifo")
    assert record["outcome"] == "ok"
    assert cli.state()["loops"]["fifo"]["status"] == "paused"
    wait_for(lambda: deliveries_done(tmp_path))  # it did not block on the FIFO
    proc = cli("logs", "fifo", timeout=10)
    assert proc.returncode == 1 and "not a regular file" in proc.stderr, proc


# -- 5. run-shaped files planted in the run folder --------------------------------------


def test_planted_run_files_are_not_shown_and_do_not_steer_pruning(cli: CLI) -> None:
    start(cli, "forger", "--print", "genuine", "--plant-runs", "3",
          extra=("--keep-runs", "1"))
    cli("tick", "--wait", check=0)
    cli("run", "forger", check=0)
    history = cli.json("history", "forger")["runs"]
    assert len(history) == 1, history  # --keep-runs 1, the forged ones not counted
    (kept,) = history
    assert "FORGED" not in str(history) and "genuine" in (kept["result"] or "")
    folder = cli.state_dir / "runs" / "forger"
    # The newest real run survived pruning; its log and record are there.
    assert (folder / f"{kept['run_id']}.json").is_file()
    assert (folder / f"{kept['run_id']}.log").is_file()
    shown = cli("logs", "forger", check=0).stdout
    assert "FORGED" not in shown and "genuine" in shown
    refused = cli("logs", "forger", "--run", "20991130T031500Z-9990")
    assert refused.returncode == 4 and "FORGED" not in refused.stdout
    text = cli("history", "forger", check=0).stdout
    assert "9990" not in text


def test_a_home_from_before_the_index_keeps_its_history(cli: CLI) -> None:
    start(cli, "old", "--print", "before the index")
    cli("tick", "--wait", check=0)
    (cli.state_dir / "run-index" / "old.json").unlink()  # as a home made before it
    (before,) = cli.json("history", "old")["runs"]
    assert "before the index" in (before["result"] or "")
    cli("run", "old", check=0)
    assert len(cli.json("history", "old")["runs"]) == 2
    assert (cli.state_dir / "run-index" / "old.json").is_file()  # written from then on


@pytest.mark.usefixtures("no_landlock")
def test_a_supervisor_moved_into_its_runs_cgroup_steps_out_before_killing_it(
        cli: CLI, tmp_path: Path) -> None:
    if not HAS_CGROUP:
        pytest.skip("no writable cgroup v2 here")
    # An agent running as root may write its supervisor's pid into the run's
    # cgroup.procs: cgroup.kill would then end the supervisor too.
    mount = next(m for m in cgroup.cgroup2_mounts() if os.path.isfile(f"{m}/cgroup.procs"))
    script = tmp_path / "mover.sh"
    script.write_text("#!/bin/sh\n"
                      "own=$(grep '^0::' /proc/self/cgroup | cut -d: -f3)\n"
                      f'echo $PPID > "{mount}$own/cgroup.procs"\n')
    script.chmod(0o700)
    cli("start", "p", "--name", "mover", "--every", "1h", "--command", str(script), check=0)
    cli("tick", "--wait", check=0)
    (record,) = cli.records("mover")
    assert record["outcome"] == "ok", record  # recorded by the supervisor itself, not lost


@pytest.mark.parametrize("case", ["agent-not-found", "gate-skips", "ok"])
def test_no_run_leaves_its_cgroup_behind(cli: CLI, tmp_path: Path, case: str) -> None:
    """One cgroup per run: a run that never starts its agent (not found, a
    gate that skips) must remove it as surely as one that ran."""
    if not HAS_CGROUP:
        pytest.skip("no writable cgroup v2 here")
    extra = {"agent-not-found": ["--command", str(tmp_path / "no-such-agent")],
             "gate-skips": ["--command", "true", "--if", "false"],
             "ok": ["--command", "true"]}[case]
    cli("start", "p", "--name", "held", "--every", "1h", *extra, check=0)
    cli("run", "held")
    (record,) = cli.records("held")
    mark = reaper.run_mark(cli.state_dir, "held", record["run_id"]).replace("/", ".")
    base = cgroup.base_cgroup()[0] or ""
    assert os.path.isdir(base)
    left = [name for name in os.listdir(base) if name.startswith(cgroup.CGROUP_PREFIX + mark)]
    assert left == [], (record["outcome"], left)
