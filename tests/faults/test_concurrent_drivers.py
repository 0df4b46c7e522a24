"""Fault 1: `tick`, `daemon` and `run` racing for the same due fire.

Twenty ticks against ten loops are in tests/test_firing.py
(test_twenty_ticks_fire_ten_due_loops_once_each); this mixes the three kinds
of driver. `run NAME` may win (exit 0, it runs the fire in the foreground) or
lose (exit 75: a run is in flight); either way the fire runs once.
"""

from __future__ import annotations

import random
import subprocess

import pytest

from conftest import CLI, wait_for

from .support import loop_state, settled, shifted, start, stop

DRIVERS = ["daemon", "tick", "tick", "tick", "run", "run"]


def race(cli: CLI, order: list[str], env: dict[str, str]) -> dict[str, list[int]]:
    """Start every driver at once; return the exit codes by kind (daemon: after
    SIGTERM, once the fire has settled)."""
    argv = {"daemon": ("daemon", "--quiet"), "tick": ("tick", "--quiet"),
            "run": ("run", "shared")}
    procs = [(kind, cli.popen(*argv[kind], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)) for kind in order]
    codes: dict[str, list[int]] = {"daemon": [], "tick": [], "run": []}
    errors = []
    for kind, proc in procs:
        if kind == "daemon":
            continue
        _, err = proc.communicate(timeout=60)
        codes[kind].append(proc.returncode)
        errors.append(err)
    wait_for(lambda: cli.records("shared") and settled(cli, "shared"), timeout=30)
    for kind, proc in procs:
        if kind == "daemon":
            codes["daemon"].append(stop(proc))
    assert all("Traceback" not in e for e in errors), errors
    return codes


@pytest.mark.slow
def test_tick_daemon_and_run_together_fire_a_due_loop_once(cli: CLI) -> None:
    # The agent outlives the start-up of every racer, so the losers meet the
    # fire in flight instead of starting a second one after it ended.
    start(cli, "shared", "--sleep", "4", "--print", "ran")
    rng = random.Random()
    seed = rng.randrange(2**32)
    rng.seed(seed)
    # Round 1 at the real clock; round 2 an hour later (fake clock), when the
    # `--every 1h` loop is due again.
    for round_no, env in enumerate([{}, shifted(3700)], start=1):
        order = list(DRIVERS)
        rng.shuffle(order)
        codes = race(cli, order, env)
        context = (seed, round_no, order, codes)
        assert codes["tick"] == [0, 0, 0], context
        assert codes["daemon"] == [0], context
        assert all(code in (0, 75) for code in codes["run"]), context
        assert codes["run"].count(0) <= 1, context

        records = cli.records("shared")
        assert len(records) == round_no, context
        assert records[-1]["outcome"] == "ok", context
        # Claims, not only finished runs: no second claim of the fire anywhere.
        assert loop_state(cli, "shared")["iterations"] == round_no, context
        assert len({r["due_at"] for r in records}) == round_no, context
