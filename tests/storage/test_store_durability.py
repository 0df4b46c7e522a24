"""Durability of loops.yaml and state.json through real processes (DESIGN §2).

* twenty `loopctl start` at the same instant all land;
* a writer killed with SIGKILL never leaves a truncated or half-written file,
  and never loses what an earlier command committed;
* files are 0600 and directories 0700 whatever the umask.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import CLI, loopctl_argv
from loopctl.storage.statefile import read_state_file

TMP_LOOPS = re.compile(r"^\.loops\.yaml\..+\.tmp$")
TMP_STATE = re.compile(r"^\.(state|summary|defs-cache)\.json\..+\.tmp$")


def read_loops(home: Path) -> dict[str, Any]:
    doc = yaml.safe_load((home / "loops.yaml").read_bytes())
    assert isinstance(doc, dict) and doc.get("version") == 1, doc
    loops = doc.get("loops") or {}
    assert isinstance(loops, dict), doc
    return loops


def read_state(home: Path) -> dict[str, Any] | None:
    path = home / "state" / "state.json"
    if not path.exists():
        return None
    state = json.loads(path.read_bytes())
    assert isinstance(state, dict) and state.get("version") == 2, state
    assert isinstance(state.get("loops"), dict), state
    return read_state_file(path)


# -- twenty at once --------------------------------------------------------------


def launch_all(argvs: list[list[str]]) -> list[tuple[int, str, str]]:
    env = dict(os.environ)
    procs = [subprocess.Popen(loopctl_argv(*argv), env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for argv in argvs]
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=120)
        out.append((proc.returncode, stdout, stderr))
    return out


def test_twenty_starts_at_once_all_land_and_the_unnamed_get_distinct_names(
        cli: CLI, home: Path) -> None:
    """Twenty `start` processes at once (one scenario; each start costs
    ~0.1 s of CPU): ten named, ten unnamed with the same prompt, which must
    each get a name of its own."""
    named = [f"loop-{i:02d}" for i in range(10)]
    argvs = [["start", "--every", "10m", "--name", name, f"job {name}"] for name in named]
    argvs += [["start", "--every", "10m", "--json", "check the build"] for _ in range(10)]
    rng = random.Random()
    order = list(range(20))
    rng.shuffle(order)  # named and unnamed interleaved as they start
    results = dict(zip(order, launch_all([argvs[i] for i in order]), strict=True))
    unnamed = []
    for i in range(20):
        code, stdout, stderr = results[i]
        assert code == 0, (argvs[i], code, stdout, stderr)
        if i >= 10:
            unnamed.append(json.loads(stdout)["name"])
    assert len(set(unnamed)) == 10 and not set(unnamed) & set(named), unnamed
    names = sorted(named + unnamed)

    loops = read_loops(home)
    assert sorted(loops) == names
    for name in named:
        assert loops[name]["prompt"] == f"job {name}"
    for name in unnamed:
        assert loops[name]["prompt"] == "check the build"
    state = read_state(home)
    assert state is not None and sorted(state["loops"]) == names
    valid = cli.json("validate")
    assert valid["valid"] == names and valid["invalid"] == {}
    assert len(cli.json("ls")["loops"]) == 20


# -- SIGKILL mid-write -----------------------------------------------------------


def temp_files(home: Path) -> set[str]:
    """Temp files of atomic writes; anything else unexpected fails the test."""
    found = set()
    for path in home.iterdir():
        if TMP_LOOPS.match(path.name):
            found.add(path.name)
        else:
            assert path.name in ("loops.yaml", "state"), f"unexpected file {path}"
    state_dir = home / "state"
    if state_dir.is_dir():
        for path in state_dir.iterdir():
            if TMP_STATE.match(path.name):
                found.add(f"state/{path.name}")
            else:
                assert path.name in ("state.json", "summary.json", "defs-cache.json",
                                     "store.lock", "lease.lock", "home.key"), \
                    f"unexpected file {path}"
    return found


def timed_start(argv: list[str]) -> float:
    begin = time.monotonic()
    proc = subprocess.run(loopctl_argv(*argv), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return time.monotonic() - begin


# Thirty kills timed at the writes of `start` and `update`; the 200 kills of
# every kind of writer are tests/faults/test_sigkill_writers.py.
@pytest.mark.slow
def test_sigkill_never_leaves_a_half_written_file(home: Path) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    # How long a whole `start` takes here: the writes happen at its very end,
    # after interpreter start-up and imports. Each kill lands after a random
    # delay in a 150 ms window ending just after that, so kills fall before,
    # during and after the writes rather than all during start-up.
    span = min(timed_start(["start", "--every", "10m", "--name", "base", "p"]),
               timed_start(["start", "--every", "10m", "--name", "base-2", "p"]))
    offset = max(0.0, span - 0.12)

    # name -> max_runs values it may have (several after a killed update)
    committed: dict[str, set[int]] = {"base": {50}, "base-2": {50}}
    maybe: dict[str, int] = {}  # killed starts: may or may not have landed
    in_state = {"base", "base-2"}  # loops whose start completed: in state.json too
    leftovers = temp_files(home)
    outcomes = {"completed": 0, "killed": 0}

    for i in range(30):
        value = 100 + i
        if i % 3 == 2:
            target = rng.choice(sorted(committed))
            argv = ["update", target, "--max-runs", str(value)]
        else:
            target = f"k{i:02d}"
            argv = ["start", "--every", "10m", "--name", target, "--max-runs", str(value),
                    f"objective {i}"]
        proc = subprocess.Popen(loopctl_argv(*argv), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        # The kill lands at a random moment of the write: the behaviour under test.
        time.sleep(offset + rng.uniform(0.0, 0.150))
        proc.send_signal(signal.SIGKILL)  # a no-op if it has already exited
        _, stderr = proc.communicate(timeout=60)
        context = f"seed {seed}, step {i}: {argv} -> {proc.returncode}"
        assert proc.returncode in (0, -signal.SIGKILL), (context, stderr)
        completed = proc.returncode == 0
        outcomes["completed" if completed else "killed"] += 1

        if argv[0] == "start":
            if completed:
                committed[target] = {value}
                in_state.add(target)
            else:
                maybe[target] = value
        elif completed:
            committed[target] = {value}
        else:
            committed[target].add(value)

        # Both files parse, whole.
        loops = read_loops(home)
        state = read_state(home)
        assert state is not None, context

        # Whatever a command committed is still there, with a value some
        # command actually wrote.
        for name, values in committed.items():
            assert name in loops, (context, f"{name} lost from loops.yaml")
            assert loops[name]["max_runs"] in values, (context, name, loops[name])
        for name in in_state:
            assert name in state["loops"], (context, f"{name} lost from state.json")
        # A killed start either landed whole or not at all; once visible it stays.
        # (It may be in loops.yaml and not yet in state.json: killed between the
        # two writes; the next driver pass reconciles state with the definitions.)
        for name, value in list(maybe.items()):
            if name in loops:
                assert loops[name]["max_runs"] == value, (context, loops[name])
                assert loops[name]["prompt"].startswith("objective"), (context, loops[name])
                committed[name] = {value}
                del maybe[name]
        assert set(state["loops"]) <= set(loops), context

        # Temp files: only a killed writer may leave them, and never under
        # the real name: one file at a time, except that summary.json is
        # written while state.json's temp file waits to replace it (a kill
        # between the two leaves one of each).
        now = temp_files(home)
        new = now - leftovers
        if completed:
            assert not new, (context, new)
        else:
            kinds = sorted(name.split(".")[1] for name in new)
            assert len(new) <= 1 or kinds == ["state", "summary"], (context, new)
        leftovers = now

    # The home is still fully usable.
    loops = read_loops(home)
    proc = subprocess.run(loopctl_argv("validate", "--json"), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, (seed, proc.stdout, proc.stderr)
    assert json.loads(proc.stdout)["valid"] == sorted(loops)
    proc = subprocess.run(loopctl_argv("start", "--every", "10m", "--name", "after", "p"),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, (seed, proc.stderr)
    assert "after" in read_loops(home)
    print(f"seed {seed}: {outcomes}")


# -- file modes ------------------------------------------------------------------


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def assert_private(root: Path) -> None:
    """Directories 0700, files 0600 (executables loopctl writes for its agents,
    such as a `loopctl` shim on their PATH, 0700)."""
    wrong = []
    for path in [root, *root.rglob("*")]:
        executable = path.is_file() and path.parent.name == "bin"
        expected = 0o700 if path.is_dir() or executable else 0o600
        if mode(path) != expected:
            wrong.append(f"{oct(mode(path))} {path} (expected {oct(expected)})")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("mask", [0o000, 0o022, 0o077], ids=["umask-000", "umask-022",
                                                             "umask-077"])
def test_files_are_0600_and_dirs_0700(cli: CLI, home: Path, mask: int) -> None:
    with umask(mask):
        cli("start", "--every", "10m", "--name", "demo", "true", check=0)
        assert mode(home) == 0o700
        assert mode(home / "state") == 0o700
        assert mode(home / "loops.yaml") == 0o600
        assert mode(home / "state" / "state.json") == 0o600
        cli("update", "demo", "--max-runs", "9", check=0)
        cli("run", "demo", check=0)
        cli("pause", "demo", check=0)
    assert (home / "state" / "runs" / "demo").is_dir()
    assert_private(home)


def test_parent_dirs_of_home_are_created_0700(cli: CLI, tmp_path: Path) -> None:
    nested = tmp_path / "a" / "b" / "home"
    with umask(0o000):
        cli("start", "--every", "10m", "--name", "demo", "p", check=0,
            env={"LOOPCTL_HOME": str(nested)})
    assert mode(tmp_path / "a") == 0o700
    assert mode(tmp_path / "a" / "b") == 0o700
    assert_private(nested)


def test_a_hand_written_0644_file_becomes_0600_when_rewritten(cli: CLI, home: Path) -> None:
    home.mkdir(mode=0o700)
    loops_file = home / "loops.yaml"
    loops_file.write_text("version: 1\nloops:\n  mine:\n    prompt: p\n    every: 1h\n")
    loops_file.chmod(0o644)
    cli("ls", check=0)
    assert mode(loops_file) == 0o644, "a reading command changed the user's file"
    cli("start", "--every", "10m", "--name", "demo", "p", check=0)
    assert mode(loops_file) == 0o600
    assert read_loops(home)["mine"] == {"prompt": "p", "every": "1h"}
