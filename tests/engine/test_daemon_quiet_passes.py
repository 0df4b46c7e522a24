"""A daemon takes a driver pass only when one can change something.

A run it fires writes state.json twice (started, settled), and each write
woke the daemon into a full pass that found nothing to do: three passes per
fire. Now the summary beside state.json (written before state.json takes
its name, so a woken daemon finds the summary of the file it was woken for)
proves when nothing is due, and the daemon sleeps on. Checked in a real
daemon process whose passes are counted; the rule itself with a fake clock.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import CLI
from loopctl.storage import atomic, paths
from loopctl.storage.paths import Paths, file_signature, quiet_until
from loopctl.storage.store import Store

# Runs the real Daemon in a fresh interpreter with `driver_pass` counted,
# and stops it (SIGTERM to itself, as `kill` would) once RUNS runs ended.
COUNTING_DAEMON = textwrap.dedent("""
    import json, os, signal, sys, threading, time
    from loopctl.engine import daemon as daemon_mod
    from pathlib import Path
    from loopctl.storage.statefile import read_state_file
    from loopctl.storage.store import Store

    runs_dir = os.path.join(os.environ["LOOPCTL_HOME"], "state", "runs", "quick")
    passes = fires = 0
    counted = daemon_mod.driver_pass

    def driver_pass(*args, **kwargs):
        global passes, fires
        report = counted(*args, **kwargs)
        passes += 1
        fires += len(report.fired)
        return report

    daemon_mod.driver_pass = driver_pass

    def records():
        if not os.path.isdir(runs_dir):
            return 0
        return sum(1 for n in os.listdir(runs_dir)
                   if n.endswith(".json") and not n.endswith(".decision.json"))

    def settled():
        state = read_state_file(Path(os.environ["LOOPCTL_HOME"], "state", "state.json"))
        return not state["loops"]["quick"].get("run")

    def asleep():
        # The main thread waits in select() (its wchan; "0" while it runs).
        with open(f"/proc/{os.getpid()}/task/{os.getpid()}/wchan") as f:
            wchan = f.read()
        return "poll" in wchan or "select" in wchan

    def until(done, deadline):
        while not done() and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop_after(runs):
        deadline = time.monotonic() + 60
        until(lambda: records() >= runs, deadline)
        # The last run's settle write (state.json after its record) and what
        # it wakes: the write woke the daemon before `settled` saw it, so once
        # it waits in select() again it has taken its pass, if any.
        until(settled, deadline)
        until(asleep, deadline)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=stop_after, args=(int(sys.argv[1]),), daemon=True).start()
    daemon_mod.Daemon(Store(), quiet=True).run()
    print(json.dumps({"passes": passes, "fires": fires, "records": records()}))
""")


@pytest.mark.slow
def test_a_daemon_takes_one_pass_per_fire_not_one_per_state_write(cli: CLI) -> None:
    cli("start", "p", "--name", "quick", "--every", "1s", "--command", "true",
        "--sandbox", "off", check=0)
    proc = subprocess.run([sys.executable, "-c", COUNTING_DAEMON, "3"], capture_output=True,
                          text=True, timeout=90, env=dict(os.environ, NO_COLOR="1"))
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["fires"] >= 3 and seen["records"] >= 3, seen
    # The start-up pass and one per fire (a loaded machine may add one where
    # a run outlived its second): three per fire before.
    assert seen["passes"] <= 2 * seen["fires"], seen


def test_the_summary_names_the_new_state_before_it_takes_its_name(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store()
    store.write_state({"loops": {}})
    seen: list[tuple[object, object]] = []
    replace = os.replace

    def watching(src: str, dst: str | Path) -> None:
        if Path(dst) == store.paths.state_file:
            summary = paths.read_summary(store.paths.summary_file) or {}
            seen.append((summary.get("state_sig"), file_signature(src)))
        replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", watching)
    store.write_state({"loops": {}})
    assert len(seen) == 1 and seen[0][0] == seen[0][1], seen
    # And the rename keeps the signature: the summary describes the file now there.
    summary = paths.read_summary(store.paths.summary_file) or {}
    assert summary["state_sig"] == file_signature(store.paths.state_file)


NOW = 1_800_000_000.0
SIG = [1, 2, 3]


def summary(**fields: object) -> dict[str, object]:
    found: dict[str, object] = {"version": 2, "defs_sig": SIG, "saved_at": NOW - 1,
                                "wake_at": NOW + 30, "busy": False}
    found.update(fields)
    return found


def test_a_summary_proves_quiet_until_its_wake_time() -> None:
    assert quiet_until(summary(), SIG, NOW) == (NOW + 30, False)
    assert quiet_until(summary(busy=True), SIG, NOW) == (NOW + 30, True)
    assert quiet_until(summary(wake_at=None), SIG, NOW) == (None, False)


@pytest.mark.parametrize("fields, loops_sig, now", [
    ({}, [1, 2, 4], NOW),                       # loops.yaml is not the one reconciled
    ({}, SIG, NOW + 30),                        # the wake time has come
    ({"saved_at": NOW + 60}, SIG, NOW),         # the clock went back
    ({"wake_at": math.nan}, SIG, NOW),
    ({"wake_at": "later"}, SIG, NOW),
    ({"wake_at": 4e10}, SIG, NOW),              # past year 3000: damage
    ({"saved_at": "x"}, SIG, NOW),
    ({"version": 9}, SIG, NOW),
])
def test_a_summary_that_proves_nothing_takes_a_pass(
        fields: dict[str, object], loops_sig: list[int], now: float) -> None:
    assert quiet_until(summary(**fields), loops_sig, now) is None


@pytest.mark.parametrize("text", ['{"wake_at": NaN}', '{"wake_at": Infinity}', "[1, 2]",
                                  '{"a": 1', ""])
def test_a_summary_that_is_not_the_stores_is_none(tmp_path: Path, text: str) -> None:
    # `json` is loaded here (the reader of a loaded store)
    (tmp_path / "summary.json").write_text(text)
    assert paths.read_summary(tmp_path / "summary.json") is None


def test_joined_paths_are_kept_a_bounded_number(tmp_path: Path) -> None:
    where = Paths(tmp_path / "config", tmp_path / "state")
    assert where.state_file is where.state_file
    for n in range(paths.MADE_LIMIT * 3):
        assert where.run_log("quick", f"20261204T000000Z-{n:04d}").name.startswith("2026")
    assert len(where._made) <= paths.MADE_LIMIT
    assert where.run_record("quick", "20261204T000000Z-0001") == \
        tmp_path / "state" / "runs" / "quick" / "20261204T000000Z-0001.json"


@pytest.mark.parametrize("reader", ["daemon", "tick"])
@pytest.mark.parametrize("plant", ["fifo", "symlink", "huge", "not utf-8", "folder"])
def test_a_summary_planted_in_the_state_folder_is_none_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plant: str, reader: str) -> None:
    """The daemon reads summary.json on every state write now (with the C
    JSON reader, loaded there), the tick fast path on every tick (with the
    flat reader): a FIFO must not block either, a symlink is not followed
    (even to a well-formed summary), 10 MiB is not read."""
    if reader == "tick":  # as in a tick, which has not loaded `json`
        monkeypatch.delitem(sys.modules, "json")
    target = tmp_path / "summary.json"
    good = tmp_path / "elsewhere.json"
    good.write_text(json.dumps(summary()))
    if plant == "fifo":
        os.mkfifo(target)
    elif plant == "symlink":
        target.symlink_to(good)
    elif plant == "huge":
        target.write_text(json.dumps(summary(pad="x" * (10 << 20))))
    elif plant == "not utf-8":
        target.write_bytes(b'{"wake_at": "\xff\xfe"}')
    else:
        target.mkdir()
    assert paths.read_summary(good) is not None  # the control: a real one reads
    assert paths.read_summary(target) is None
