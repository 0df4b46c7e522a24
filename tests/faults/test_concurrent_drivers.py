"""Fault 1: `tick`, `daemon` and `run` racing for the same due fire.

Twenty ticks against ten loops are in tests/engine/test_firing.py
(test_twenty_ticks_fire_ten_due_loops_once_each); this mixes the three kinds
of driver. `run NAME` may win (exit 0: it runs the fire in the foreground) or
lose (exit 75: a run is in flight); either way the fire runs once.
"""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from conftest import CLI, wait_for

from .support import loop_state, settled, shifted, start_gated, stop

DRIVERS = ["daemon", "tick", "tick", "tick", "run", "run"]
ARGV = {"daemon": ("daemon", "--quiet"), "tick": ("tick", "--quiet"), "run": ("run", "shared")}


def holder_pid(cli: CLI) -> int | None:
    run = loop_state(cli, "shared").get("run")
    return (run.get("supervisor") or {}).get("pid") if run and run.get("agent") else None


def race(cli: CLI, order: list[str], env: dict[str, str], gate: Path) -> dict[str, list[int]]:
    """Start every driver at once; return the exit codes by kind (the
    daemon's after SIGTERM, once the fire has settled).

    The fire's agent waits at `gate`, opened only when every tick has exited
    and every `run` has either exited or is the one holding the fire: a loser
    always meets the fire in flight, never a finished fire that it could
    legitimately run again, however slow the machine."""
    procs = [(kind, cli.popen(*ARGV[kind], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)) for kind in order]
    racers = [(kind, proc) for kind, proc in procs if kind != "daemon"]
    wait_for(lambda: holder_pid(cli) is not None and all(
        proc.poll() is not None or (kind == "run" and proc.pid == holder_pid(cli))
        for kind, proc in racers), timeout=90)
    gate.touch()
    codes: dict[str, list[int]] = {"daemon": [], "tick": [], "run": []}
    errors = []
    for kind, proc in racers:
        _, err = proc.communicate(timeout=60)
        codes[kind].append(proc.returncode)
        errors.append(err)
    wait_for(lambda: settled(cli, "shared"), timeout=60)
    for kind, proc in procs:
        if kind == "daemon":
            codes["daemon"].append(stop(proc))
    assert not any("Traceback" in e for e in errors), errors
    return codes


@pytest.mark.slow
def test_tick_daemon_and_run_together_fire_a_due_loop_once(cli: CLI, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    start_gated(cli, "shared", gate)
    rng = random.Random()
    seed = rng.randrange(2**32)
    rng.seed(seed)
    # Round 1 at the real clock; round 2 an hour later on a fake clock, when
    # the `--every 1h` loop is due again.
    for round_no, env in enumerate([{}, shifted(3700)], start=1):
        gate.unlink(missing_ok=True)
        order = list(DRIVERS)
        rng.shuffle(order)
        codes = race(cli, order, env, gate)
        context = (f"seed {seed}", round_no, order, codes)
        assert codes["tick"] == [0, 0, 0], context
        assert codes["daemon"] == [0], context
        assert sorted(codes["run"]) in ([0, 75], [75, 75]), context

        records = cli.records("shared")
        assert len(records) == round_no, context
        assert records[-1]["outcome"] == "ok", context
        # Claims, not only finished runs: nobody claimed the fire a second time.
        assert loop_state(cli, "shared")["iterations"] == round_no, context
        assert len({r["due_at"] for r in records}) == round_no, context
