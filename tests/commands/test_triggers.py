"""`loopctl trigger` and `--on-demand` loops (DESIGN §17): exit codes,
coalescing, payload bounds, the storm, the daemon's wake, chaining."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from faults.support import asleep_in_select
from fixed_zone import UTC, zone_of

from conftest import CLI, TESTS, agent_command, loopctl_argv, wait_for
from loopctl.commands.control import control
from loopctl.commands.trigger import trigger
from loopctl.domain.errors import LoopctlError
from loopctl.storage.store import Store


def on_demand(cli: CLI, name: str, *agent_args: str, extra: tuple[str, ...] = ()) -> None:
    cli("start", "p", "--name", name, "--on-demand", "--command", agent_command(*agent_args),
        *extra, check=0)


def agent_calls(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_an_on_demand_loop_fires_only_when_triggered(cli: CLI, tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    on_demand(cli, "od", "--record", str(calls))
    assert "on demand" in cli("ls").stdout
    cli("tick", "--wait", check=0)
    assert cli.records("od") == []
    payload = tmp_path / "payload.json"
    payload.write_text('{"pr": 7}')
    first = cli.json("trigger", "od", "--payload", str(payload))
    assert (first["accepted"], first["triggers"], first["when"]) == (True, 1, "now")
    assert cli.json("trigger", "od")["triggers"] == 2  # without a payload: the last one stays
    cli("tick", "--wait", check=0)
    cli("tick", "--wait", check=0)  # coalesced: one fire
    [record] = cli.records("od")
    assert (record["trigger"], record["triggers"], record["outcome"]) == ("api", 2, "ok")
    env = agent_calls(calls)[0]["env"]
    assert Path(env["LOOPCTL_TRIGGER_FILE"]).read_text() == '{"pr": 7}'
    assert cli.state()["loops"]["od"]["next_due"] is None  # no schedule of its own


def test_refusals_have_their_exit_codes(cli: CLI) -> None:
    on_demand(cli, "od")
    assert cli("trigger", "nope").returncode == 4
    cli("pause", "od", check=0)
    proc = cli("trigger", "od")
    assert proc.returncode == 2 and "paused (user)" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert cli.state()["loops"]["od"]["triggered"] is None


@pytest.mark.parametrize("data, word", [
    (b"x" * (64 * 1024 + 1), "65537 bytes"),
    (b"ok \xff\xfe", "not UTF-8"),
    (b"a\0b", "NUL"),
])
def test_bad_payloads_are_refused_and_nothing_is_kept(cli: CLI, tmp_path: Path,
                                                      data: bytes, word: str) -> None:
    on_demand(cli, "od")
    bad = tmp_path / "bad"
    bad.write_bytes(data)
    proc = cli("trigger", "od", "--payload", str(bad))
    assert proc.returncode == 2 and word in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert cli.state()["loops"]["od"]["triggered"] is None
    assert not (cli.state_dir / "runs" / "od" / "trigger.pending").exists()


def test_a_payload_is_never_a_flag_or_a_placeholder(cli: CLI, tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    cli("start", "the prompt", "--name", "od", "--on-demand", "--command",
        agent_command("--record", str(calls), "{prompt}", "{run_id}"), check=0)
    hostile = "--yolo {prompt} {run_id} {prompt_file} $(touch pwned)"
    proc = subprocess.run(loopctl_argv("trigger", "od", "--payload", "-"), input=hostile,
                          text=True, capture_output=True)
    assert proc.returncode == 0, proc.stderr
    exact = "x" * (64 * 1024)  # the limit itself is accepted
    cli("tick", "--wait", check=0)
    call = agent_calls(calls)[0]
    assert call["argv"][-2] == "the prompt" and hostile not in " ".join(call["argv"])
    assert Path(call["env"]["LOOPCTL_TRIGGER_FILE"]).read_text() == hostile
    assert not (tmp_path / "pwned").exists()
    limit = tmp_path / "limit"
    limit.write_text(exact)
    assert cli("trigger", "od", "--payload", str(limit)).returncode == 0


def test_a_trigger_during_a_run_is_its_one_pending_fire(cli: CLI, tmp_path: Path) -> None:
    go = tmp_path / "go"
    on_demand(cli, "od", "--wait-for", str(go))
    cli("trigger", "od", check=0)
    tick = cli.popen("tick", "--wait")
    wait_for(lambda: cli.state()["loops"]["od"]["run"])
    for _ in range(3):
        assert cli.json("trigger", "od")["when"] == "after the run in flight"
    go.touch()
    assert tick.wait(30) == 0
    assert cli.state()["loops"]["od"]["next_due"] is not None  # armed by the pending fire
    cli("tick", "--wait", check=0)
    first, second = cli.records("od")
    assert (first["triggers"], second["triggers"], second["trigger"]) == (1, 3, "api")
    cli("tick", "--wait", check=0)
    assert len(cli.records("od")) == 2


def test_a_storm_of_triggers_is_one_fire_with_no_lost_update(cli: CLI, tmp_path: Path) -> None:
    on_demand(cli, "od")
    on_demand(cli, "other")
    store = Store()
    errors: list[BaseException] = []
    took: list[float] = []

    def fire(i: int) -> None:
        try:
            trigger(store, "od", f"payload {i}")
        except (LoopctlError, OSError) as exc:
            errors.append(exc)

    def other_command() -> None:  # another command wants the lock mid-storm
        began = time.monotonic()
        control(Store(), "other", "pause")
        took.append(time.monotonic() - began)

    threads = [threading.Thread(target=fire, args=(i,)) for i in range(100)]
    threads.insert(50, threading.Thread(target=other_command))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    # Not starved: a command that waited out the store's lock timeout (60 s)
    # would have raised in its thread and left `took` empty.
    assert took
    st = cli.state()["loops"]
    assert st["od"]["triggered"]["count"] == 100
    assert st["other"]["status"] == "paused"
    cli("tick", "--wait", check=0)
    cli("tick", "--wait", check=0)
    [record] = cli.records("od")
    assert record["triggers"] == 100
    payload = (cli.state_dir / "runs" / "od" / f"{record['run_id']}.trigger").read_text()
    assert payload.startswith("payload ")


@pytest.mark.real_processes
def test_a_daemon_fires_a_trigger_within_about_a_second(cli: CLI) -> None:
    on_demand(cli, "od")
    daemon = cli.popen("daemon", stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (cli.state_dir / "lease.json").exists())
        wait_for(lambda: asleep_in_select(daemon.pid))  # settled into its idle sleep
        began = time.monotonic()
        cli("trigger", "od", check=0)
        wait_for(lambda: cli.records("od"), timeout=20, interval=0.02)
        # The daemon looks every second (its watch interval); an on-demand
        # loop is otherwise never due. The bound is slack for a loaded 2-core
        # machine, not a speed claim: bench/ measures the delay.
        assert time.monotonic() - began < 8
    finally:
        daemon.terminate()
        daemon.wait(10)


def test_chaining_a_hook_that_triggers_the_next_loop(cli: CLI, tmp_path: Path) -> None:
    hook = tmp_path / "chain.sh"
    hook.write_text("#!/bin/sh\ncat >/dev/null\nexec "
                    + " ".join(loopctl_argv("trigger", "b")) + "\n")
    hook.chmod(0o700)
    cli("start", "p", "--name", "a", "--every", "1h", "--on-attention", str(hook),
        "--command", agent_command("--decide", "complete"), check=0)
    on_demand(cli, "b")
    cli("tick", "--wait", check=0)  # a completes; its hook triggers b
    assert cli.state()["loops"]["a"]["status"] == "completed"
    wait_for(lambda: cli.state()["loops"]["b"]["triggered"])
    cli("tick", "--wait", check=0)
    [record] = cli.records("b")
    assert record["trigger"] == "api"


def test_trigger_help_names_the_payload_limit() -> None:
    proc = subprocess.run([sys.executable, "-m", "loopctl", "trigger", "--help"],
                          capture_output=True, text=True)
    assert "64 KiB" in proc.stdout


def test_a_payload_file_the_agent_planted_is_never_read_back(cli: CLI, tmp_path: Path) -> None:
    """The agent may write anywhere its user can: a symlink (to a secret) or
    a FIFO left as the pending payload, or as its next run's payload file,
    is neither followed nor handed to the next run."""
    secret = tmp_path / "secret"
    secret.write_text("TOKEN=hunter2")
    calls = tmp_path / "calls.jsonl"
    on_demand(cli, "od", "--record", str(calls))
    cli("trigger", "od", check=0)
    cli("tick", "--wait", check=0)
    folder = cli.state_dir / "runs" / "od"
    (folder / "trigger.pending").symlink_to(secret)
    cli("trigger", "od", check=0)
    cli("tick", "--wait", check=0)
    second = agent_calls(calls)[1]["env"]
    assert "LOOPCTL_TRIGGER_FILE" not in second  # the symlink is not a payload
    assert secret.read_text() == "TOKEN=hunter2"
    import os

    os.mkfifo(folder / "trigger.pending.fifo")
    os.replace(folder / "trigger.pending.fifo", folder / "trigger.pending")
    cli("trigger", "od", check=0)
    tick = cli("tick", "--wait", timeout=30)  # a FIFO must not block the run
    assert tick.returncode == 0
    assert "LOOPCTL_TRIGGER_FILE" not in agent_calls(calls)[2]["env"]


def test_a_preset_agent_gets_gate_output_and_payload_in_its_envelope(
        cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.setenv("PATH", str(TESTS / "bin") + os.pathsep
                       + os.environ["PATH"])
    calls = tmp_path / "claude.jsonl"
    cli("start", "fix CI", "--name", "c", "--agent", "claude", "--on-demand",
        "--if", agent_command("--print", "job 12 is red"),
        "--env", f"FAKE_RECORD={calls}",
        "--sandbox", "off",  # the fake agent records outside its working directory
        check=0)
    proc = subprocess.run(loopctl_argv("trigger", "c", "--payload", "-"),
                          input="PR 42 {prompt}", text=True, capture_output=True)
    assert proc.returncode == 0, proc.stderr
    cli("tick", "--wait", check=0)
    prompt = next(a for a in agent_calls(calls)[0]["argv"] if a.startswith("fix CI"))
    assert "job 12 is red" in prompt and "PR 42 {prompt}" in prompt
    assert prompt.count("(data, not instructions)") == 2


def test_a_trigger_during_a_run_whose_supervisor_died_still_fires() -> None:
    from loopctl.domain import lifecycle
    from loopctl.domain.model import parse_loop
    from loopctl.domain.state import new_loop_state

    loop = parse_loop("od", {"prompt": "p", "on_demand": True})
    st = new_loop_state(loop, 1000.0, zone=zone_of(loop))
    assert st.next_due is None
    st.triggered, st.next_due = {"count": 1, "at": 1000.0}, 1000.0
    state = {"loops": {"od": st}}
    run = lifecycle.plan({"od": loop}, {}, state, 1001.0, lambda ref: True,
                         zones=zone_of).fired[0][1]
    assert (run["trigger"], run["triggers"]) == ("api", 1)
    run["supervisor"] = {"pid": 99999, "ct": 1.0}
    st.triggered, st.pending = {"count": 1, "at": 1002.0}, True  # trigger mid-run
    lost = lifecycle.plan({"od": loop}, {}, state, 1003.0, lambda ref: False, zones=zone_of)
    assert lost.lost and st.next_due == 1003.0
    again = lifecycle.plan({"od": loop}, {}, state, 1004.0, lambda ref: True, zones=zone_of)
    assert again.fired and again.fired[0][1]["trigger"] == "api"


def test_a_run_cannot_trigger_its_own_loop(cli: CLI, tmp_path: Path) -> None:
    """An agent has `loopctl` on its PATH; triggering its own loop from its
    run (even from a setsid grandchild, which stays under the subreaper)
    would bypass the loop's pacing."""
    out = tmp_path / "codes"
    script = (f"loopctl trigger od 2>>{out}.err; echo $? >> {out}; "
              f"setsid sh -c 'loopctl trigger od 2>>{out}.err; echo $? >> {out}'; "
              "loopctl trigger other; echo $? >> " + str(out))
    cli("start", "p", "--name", "od", "--on-demand", "--command", f"sh -c {script!r}",
        check=0)
    on_demand(cli, "other")
    cli("trigger", "od", check=0)
    cli("tick", "--wait", check=0)
    assert out.read_text().split() == ["2", "2", "0"]  # another loop may be chained
    assert "its own run" in Path(f"{out}.err").read_text()
    st = cli.state()["loops"]
    assert st["od"]["triggered"] is None and st["od"]["next_due"] is None
    assert st["other"]["triggered"]["count"] == 1


def test_the_gate_reads_the_payload_and_may_skip_the_triggered_fire(
        cli: CLI, tmp_path: Path) -> None:
    cli("start", "p", "--name", "od", "--on-demand", "--command", agent_command(),
        "--if", "sh -c 'cat \"$LOOPCTL_TRIGGER_FILE\"; exit 1'", check=0)
    payload = tmp_path / "payload"
    payload.write_text("nothing for you")
    cli("trigger", "od", "--payload", str(payload), check=0)
    cli("tick", "--wait", check=0)
    [record] = cli.records("od")
    assert (record["outcome"], record["trigger"], record["triggers"]) == ("skipped", "api", 1)
    assert record["gate"]["output_tail"] == "nothing for you"
    assert cli.state()["loops"]["od"]["triggered"] is None  # the trigger was answered


def test_status_shows_the_gate_and_the_triggers_waiting(cli: CLI) -> None:
    cli("start", "p", "--name", "od", "--on-demand", "--if", "test -e go",
        "--command", "true", check=0)
    cli("trigger", "od", check=0)
    cli("trigger", "od", check=0)
    shown = cli("status", "od").stdout
    assert "gate       test -e go" in shown and "triggered  2 time(s)" in shown
    info = cli.json("status", "od")
    info = info.get("loops", [info])[0] if "loops" in info else info
    assert info["gate"] == {"argv": ["test", "-e", "go"], "timeout_s": 120}
    assert info["triggers_pending"] == 2


@pytest.mark.parametrize("bad", [{"count": 0, "at": 1.0}, {"count": "9", "at": 1.0},
                                 {"count": 2, "at": "soon"}, ["count", 2]])
def test_a_damaged_trigger_count_in_state_is_repaired_and_pauses(bad: object) -> None:
    from loopctl.domain.model import parse_loop
    from loopctl.domain.state import new_loop_state, repair

    st = dict(vars(new_loop_state(parse_loop("od", {"prompt": "p", "on_demand": True}), 1.0,
                                  zone=UTC)))
    st["triggered"] = bad
    clean, fields = repair("od", st)
    assert fields == ["triggered"] and clean.triggered is None
    assert (clean.status, clean.reason) == ("paused", "error")
    st["triggered"] = {"count": 3, "at": 5}
    clean, fields = repair("od", st)
    assert fields == [] and vars(clean) == {**st, "triggered": {"count": 3, "at": 5.0}}
