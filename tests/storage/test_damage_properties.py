"""Property test (DESIGN §11): whatever damage one loop's state entry or one
run record suffers, every command exits with a documented code in one line,
never a traceback, and the other loop keeps firing.

Real `loopctl` processes for the drivers (`run`, `tick`), the other
commands in-process through the console script's entry point;
hypothesis picks the damage. Few examples, since each one costs several
process starts."""

from __future__ import annotations

import json
import math
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import in_process, loopctl_argv, runs_in_process
from loopctl.domain.state import SCHEMA

DOCUMENTED = {0, 1, 2, 3, 4, 75, 124, 130}
SLOW = settings(max_examples=5, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20)
    | st.sampled_from(["--yolo", "../../x", "20261130T031500Z-0001", "active", "paused"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=8)
entry_damage = st.one_of(
    st.tuples(st.just("set"), st.dictionaries(st.sampled_from(sorted(SCHEMA)), values,
                                              min_size=1, max_size=4)),
    st.tuples(st.just("drop"), st.lists(st.sampled_from(sorted(SCHEMA)), min_size=1,
                                        max_size=4)),
    st.tuples(st.just("replace"), values))


def run(home: Path, *args: str, offset: int = 0) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "LOOPCTL_HOME": str(home), "NO_COLOR": "1",
           "HOME": str(home.parent), "LOOPCTL_KILL_GRACE": "2",
           "LOOPCTL_CLOCK_OFFSET": str(offset)}
    if runs_in_process(args):
        # Reading commands through the console script's entry point in this
        # process (conftest.in_process): the same exit codes and output, a
        # traceback is an exception here; ~0.1 s of CPU less per command.
        with pytest.MonkeyPatch.context() as patch:
            for key, value in env.items():
                patch.setenv(key, value)
            return in_process(*args)
    return subprocess.run(loopctl_argv(*args), capture_output=True, text=True, env=env,
                          timeout=60)


def one_line_or_success(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode in DOCUMENTED, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    if proc.returncode not in (0, 1):
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two loops that have each run once, every hour."""
    home = tmp_path_factory.mktemp("damage") / "home"
    agent = [sys.executable, "-c", "print('done')"]
    for name in ("bad", "good"):
        proc = run(home, "start", "p", "--name", name, "--every", "1h",
                   "--command", shlex.join(agent))
        assert proc.returncode == 0, proc.stderr
        assert run(home, "run", name).returncode == 0
    return home


def copy_home(template: Path, tmp_path: Path) -> Path:
    home = tmp_path / "home"
    if home.exists():
        shutil.rmtree(home)
    shutil.copytree(template, home, symlinks=True)
    return home


def damage_entry(home: Path, how: str, damage: Any) -> None:
    path = home / "state" / "state.json"
    state = json.loads(path.read_text())
    entry = state["loops"]["bad"]
    if how == "set":
        entry.update(damage)
    elif how == "drop":
        for key in damage:
            entry.pop(key, None)
    else:
        state["loops"]["bad"] = damage
    path.write_text(json.dumps(state))  # NaN and Infinity written as Python does


def strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(name)

    return json.loads(text, parse_constant=refuse)


def check_every_command(home: Path) -> None:
    good_runs = len(list((home / "state" / "runs" / "good").glob("*.json")))
    for args in (["ls", "--json"], ["status", "bad", "--json"], ["history", "bad", "--json"],
                 ["doctor", "--json"], ["tick", "--wait"]):
        # Two hours on for the tick: `good` is due again.
        proc = run(home, *args, offset=7200 if args[0] == "tick" else 0)
        one_line_or_success(proc)
        if "--json" in args and proc.returncode == 0:
            strict(proc.stdout)
    assert len(list((home / "state" / "runs" / "good").glob("*.json"))) == good_runs + 1
    state = strict((home / "state" / "state.json").read_text())
    assert all(not isinstance(v, float) or math.isfinite(v)
               for v in state["loops"]["bad"].values())


@pytest.mark.slow
@SLOW
@given(entry_damage)
def test_a_damaged_state_entry_hurts_only_its_loop(template: Path, tmp_path: Path,
                                                    damage: tuple[str, Any]) -> None:
    home = copy_home(template, tmp_path)
    damage_entry(home, *damage)
    check_every_command(home)


@pytest.mark.slow
@SLOW
@given(values | st.binary(max_size=64).map(lambda b: b"\xff" + b))
def test_a_damaged_run_record_hurts_only_its_loop(template: Path, tmp_path: Path,
                                                  content: Any) -> None:
    home = copy_home(template, tmp_path)
    (record,) = (home / "state" / "runs" / "bad").glob("*.json")
    data = content if isinstance(content, bytes) else json.dumps(content).encode()
    record.write_bytes(data)
    check_every_command(home)
