"""The firing engine with real processes: drivers, supervisor, logs (issue 3)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import CLI, agent_command, wait_for
from loopctl.engine import procs


def start(cli: CLI, name: str, *agent_args: str, every: str = "1h",
          extra: tuple[str, ...] = ()) -> None:
    cli("start", "the prompt", "--name", name, "--every", every,
        "--command", agent_command(*agent_args), *extra, check=0)


def finished(cli: CLI, loop: str, count: int = 1) -> list[dict]:
    return wait_for(lambda: len(cli.records(loop)) >= count and cli.records(loop))


@pytest.mark.slow
def test_daemon_fires_every_2s_loop_repeatedly(cli: CLI) -> None:
    start(cli, "fast", "--print", "tick-output", every="2s")
    daemon = cli.popen("daemon", "--quiet")
    try:
        # Four runs take ~8 s at this pace; a busy machine only makes it slower.
        wait_for(lambda: len(cli.records("fast")) >= 4, timeout=60, interval=0.2)
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=10) == 0
    records = cli.records("fast")
    assert len(records) >= 4
    for record in records:
        assert record["outcome"] == "ok"
        assert "tick-output" in Path(record["log"]).read_text()
    starts = [r["started_at"] for r in records]
    assert starts == sorted(starts)
    assert not (cli.state_dir / "lease.json").exists(), "SIGTERM must release the lease"


def test_twenty_ticks_fire_ten_due_loops_once_each(cli: CLI) -> None:
    for n in range(10):
        start(cli, f"loop{n}", "--print", f"hello {n}")
    # All ten at once: the capped race is tests/engine/test_capacity.py's.
    loops_file = cli.home / "loops.yaml"
    loops_file.write_text("max_concurrent: 0\n" + loops_file.read_text())
    ticks = [cli.popen("tick", "--quiet", stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL) for _ in range(20)]
    assert [t.wait(timeout=60) for t in ticks] == [0] * 20
    for n in range(10):
        records = finished(cli, f"loop{n}")
        assert len(records) == 1
        assert records[0]["outcome"] == "ok"
    # Every claim is in state before a tick exits, and all twenty have
    # exited: one claim per loop and none in flight means no second run
    # can still be on its way.
    loops = wait_for(lambda: all(not st["run"] for st in cli.state()["loops"].values())
                     and cli.state()["loops"])
    assert {name: st["iterations"] for name, st in loops.items()} == \
        {f"loop{n}": 1 for n in range(10)}
    assert sum(len(cli.records(f"loop{n}")) for n in range(10)) == 10


def test_tick_wait_reports_failure_and_timeout(cli: CLI) -> None:
    start(cli, "bad", "--exit", "3")
    proc = cli("tick", "--wait")
    assert proc.returncode == 1
    assert cli.records("bad")[0]["exit_code"] == 3
    start(cli, "slow", "--sleep", "30", extra=("--timeout", "1s"))
    proc = cli("tick", "--wait", "--json")
    assert proc.returncode == 124
    report = json.loads(proc.stdout)
    assert [r["outcome"] for r in report["runs"]] == ["timeout"]


def test_tick_json_says_why_a_running_loop_is_not_fired(cli: CLI, tmp_path: Path) -> None:
    start(cli, "busy", "--sleep", "5")
    first = cli.json("tick")
    assert [f["loop"] for f in first["fired"]] == ["busy"]
    wait_for(lambda: cli.state()["loops"]["busy"]["run"].get("agent"))
    second = cli.json("tick")
    assert second["fired"] == []
    assert second["skipped"] == [{"loop": "busy", "reason":
                                  f"running ({first['fired'][0]['run_id']})"}]


def test_run_in_foreground_tees_output_and_returns_exit_code(cli: CLI) -> None:
    start(cli, "fg", "--print", "to-terminal", "--exit", "5")
    proc = cli("run", "fg")
    assert proc.returncode == 1
    assert "to-terminal" in proc.stdout
    record = cli.records("fg")[0]
    assert record["exit_code"] == 5 and record["outcome"] == "failed"
    assert "to-terminal" in Path(record["log"]).read_text()


def test_run_exits_75_while_a_run_is_in_flight(cli: CLI) -> None:
    start(cli, "one", "--sleep", "5")
    first = cli.popen("run", "one", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (cli.state()["loops"]["one"].get("run") or {}).get("agent"))
        second = cli("run", "one")
        assert second.returncode == 75
        assert "in flight" in second.stderr
    finally:
        first.send_signal(signal.SIGINT)
        assert first.wait(timeout=15) == 130
    assert [r["outcome"] for r in cli.records("one")] == ["killed"]


def test_timeout_kills_a_setsid_grandchild(cli: CLI, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    start(cli, "tree", "--grandchild", "120", "--sleep", "120", extra=("--timeout", "2s"))
    proc = cli("run", "tree", env={"FAKE_AGENT_PIDS": str(pids)})
    assert proc.returncode == 124
    record = cli.records("tree")[0]
    assert record["outcome"] == "timeout"
    grandchild = int(pids.read_text().split()[0])
    assert not psutil.pid_exists(grandchild) or \
        psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE


def test_agent_gets_loop_environment_and_prompt_on_stdin(cli: CLI, tmp_path: Path) -> None:
    out = tmp_path / "record.jsonl"
    start(cli, "envy", "--record", str(out), extra=("--env", "FAKE_COLOR=blue"))
    cli("run", "envy", check=0)
    seen = json.loads(out.read_text().splitlines()[0])
    env = seen["env"]
    assert env["LOOPCTL_LOOP"] == "envy"
    assert env["LOOPCTL_ITERATION"] == "1"
    assert env["FAKE_COLOR"] == "blue"
    run_id = env["LOOPCTL_RUN_ID"]
    # Its own folder, outside the run folder only loopctl writes (DESIGN §14).
    decision = Path(env["LOOPCTL_DECISION_FILE"])
    assert decision == cli.state_dir / "decisions" / "envy" / run_id / "decision.json"
    assert not decision.parent.exists()  # removed after the run
    assert seen["stdin"] == "the prompt"  # no {prompt} placeholder: prompt on stdin


def test_agent_pwd_is_the_loops_cwd_not_the_drivers(cli: CLI, tmp_path: Path) -> None:
    # opencode takes its project from $PWD: the driver's own must not leak.
    out, work = tmp_path / "record.jsonl", tmp_path / "work"
    work.mkdir()
    start(cli, "where", "--record", str(out), extra=("--cwd", str(work)))
    cli("run", "where", env={"PWD": str(tmp_path)}, check=0)
    seen = json.loads(out.read_text())
    assert seen["cwd"] == str(work)
    assert seen["env"]["PWD"] == str(work)


def test_prompt_placeholder_goes_in_argv_not_stdin(cli: CLI, tmp_path: Path) -> None:
    out = tmp_path / "record.jsonl"
    command = agent_command("--record", str(out)) + " -- {prompt}"
    cli("start", "it's a 'quoted' prompt\nwith -dash", "--name", "argv", "--every", "1h",
        "--command", command, check=0)
    cli("run", "argv", check=0)
    seen = json.loads(out.read_text())
    assert seen["argv"][-1] == "it's a 'quoted' prompt\nwith -dash"
    assert seen["stdin"] == ""


def test_supervisor_killed_mid_run_is_recorded_lost(cli: CLI, tmp_path: Path) -> None:
    start(cli, "victim", "--sleep", "4")
    cli("tick", check=0)
    run = wait_for(lambda: (cli.state()["loops"]["victim"].get("run") or {}).get("agent")
                   and cli.state()["loops"]["victim"]["run"])
    os.kill(run["supervisor"]["pid"], signal.SIGKILL)
    wait_for(lambda: not psutil.pid_exists(run["supervisor"]["pid"]))
    report = cli.json("tick")
    assert report["lost"] == [run["run_id"]]
    assert report["fired"] == []  # the pass that finds it lost fires nothing for it
    record = cli.records("victim")[0]
    assert record["outcome"] == "lost"
    # The agent died with its supervisor (DESIGN §14), not 4 s later.
    assert not procs.alive(run["agent"])
    state = cli.state()["loops"]["victim"]
    assert state["status"] == "active" and state["next_due"] is not None
    assert state["failures"] == 1  # a lost run counts toward --max-failures
    assert len(cli.records("victim")) == 1  # lost once, never started a second time


def test_log_holds_a_large_flood_of_output(cli: CLI) -> None:
    size = 200 * 1024 * 1024
    start(cli, "flood", "--flood", str(size), extra=("--max-log", "300MiB"))
    cli("tick", "--wait", check=0)
    record = cli.records("flood")[0]
    log = Path(record["log"])
    lines = log.read_bytes().splitlines(keepends=True)
    body = b"".join(line for line in lines if not line.startswith(b"# loopctl:"))
    assert len(body) == size


@pytest.mark.parametrize("driver", ["tick", "run"])
def test_log_is_the_agents_bytes_then_loopctls_whole_lines(cli: CLI, driver: str) -> None:
    # The agent's output starts the log at offset 0 (page-aligned writes for a
    # flood); loopctl's lines follow it, each on a line of its own even when
    # the agent's last line did not end.
    cli("start", "p", "--name", "partial", "--every", "1h",
        "--command", "printf 'no newline at the end'", check=0)
    cli("tick", "--wait", check=0) if driver == "tick" else cli("run", "partial", check=0)
    (record,) = cli.records("partial")
    lines = Path(record["log"]).read_bytes().split(b"\n")
    assert lines[0] == b"no newline at the end", lines
    assert lines[1].startswith(f"# loopctl: run {record['run_id']} of partial ".encode())
    # Notes between (what the run was confined to) are loopctl's whole lines too.
    assert all(line.startswith(b"# loopctl: ") for line in lines[2:-1]), lines
    assert lines[-2].startswith(f"# loopctl: run {record['run_id']} ended ".encode())
    assert lines[-1] == b""
    assert record["result"] == "no newline at the end"


def test_logs_follow_returns_when_the_run_ends(cli: CLI) -> None:
    start(cli, "follow", "--print", "early", "--sleep", "2", "--exit", "0")
    cli("tick", check=0)
    wait_for(lambda: cli.state()["loops"]["follow"].get("run"))
    proc = cli("logs", "follow", "-f", timeout=30)
    assert proc.returncode == 0
    assert "early" in proc.stdout
    assert "outcome ok" in proc.stdout


def test_keep_runs_prunes_oldest(cli: CLI) -> None:
    start(cli, "prune", "--print", "x", extra=("--keep-runs", "2"))
    for _ in range(4):
        cli("run", "prune", check=0)
    history = cli.json("history", "prune")["runs"]
    assert [r["iteration"] for r in history] == [3, 4]
    files = list((cli.state_dir / "runs" / "prune").iterdir())
    assert all(f.name.startswith(tuple(r["run_id"] for r in history)) for f in files)


def test_every_waits_from_the_end_of_the_run(cli: CLI) -> None:
    start(cli, "paced", "--sleep", "1.5", every="10s")
    cli("tick", "--wait", check=0)
    record = cli.records("paced")[0]
    state = cli.state()["loops"]["paced"]
    ended = record["ended_at"]
    from loopctl.domain.timestamps import parse_iso

    assert state["next_due"] == pytest.approx(parse_iso(ended) + 10, abs=1.0)
    assert state["next_due"] - parse_iso(record["started_at"]) >= 11


def test_cron_overlap_queue_gives_exactly_one_catch_up(cli: CLI, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    cli("start", "p", "--name", "cq", "--cron", "* * * * *", "--tz", "UTC",
        "--command", agent_command("--wait-for", str(gate)), check=0)
    # loopctl's clock moves so cron slots pass while the first run is in
    # flight; each moment is placed within its minute (never a few seconds
    # before a boundary, which a slow machine could cross between two calls).
    base = (time.time() // 60 + 1) * 60  # the loop's first slot
    first = cli.json("tick", env=at(base + 1))
    assert len(first["fired"]) == 1
    for later in (65, 125, 185):
        report = cli.json("tick", env=at(base + later))
        assert report["fired"] == []
    assert cli.state()["loops"]["cq"]["pending"] is True
    gate.touch()
    finished(cli, "cq", 1)
    second = cli.json("tick", env=at(base + 190))
    assert len(second["fired"]) == 1, second
    finished(cli, "cq", 2)
    third = cli.json("tick", env=at(base + 210))  # the same minute: no slot since
    assert third["fired"] == []


def at(moment: float) -> dict[str, str]:
    """An env whose loopctl clock reads `moment`, however long the test ran:
    the offset is taken from the real clock at each call, not once."""
    return {"LOOPCTL_CLOCK_OFFSET": f"{moment - time.time():.3f}"}


def test_cron_overlap_skip_drops_the_fire(cli: CLI, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    cli("start", "p", "--name", "cs", "--cron", "* * * * *", "--tz", "UTC",
        "--overlap", "skip", "--command", agent_command("--wait-for", str(gate)), check=0)
    slot = (time.time() // 60 + 2) * 60  # a minute boundary after the loop's first slot
    assert len(cli.json("tick", env=at(slot + 5))["fired"]) == 1
    assert cli.json("tick", env=at(slot + 65))["fired"] == []  # next slot, run in flight
    assert cli.state()["loops"]["cs"]["pending"] is False
    gate.touch()
    finished(cli, "cs", 1)
    assert cli.json("tick", env=at(slot + 70))["fired"] == []  # skipped, not queued


def test_tick_with_nothing_due_writes_nothing_and_skips_typer(cli: CLI) -> None:
    start(cli, "later", "--print", "x", extra=("--after", "1h"))
    cli("tick", check=0)  # reconcile once
    state_file = cli.state_dir / "state.json"
    before = state_file.stat().st_mtime_ns
    code = ("import sys; sys.argv = ['loopctl', 'tick']\n"
            "from loopctl.entry import main\n"
            "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
            "print(code, 'typer' in sys.modules, 'yaml' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["0", "False", "False"]
    assert state_file.stat().st_mtime_ns == before
