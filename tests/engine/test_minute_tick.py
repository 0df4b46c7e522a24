"""A real `loopctl tick` (cron's, through the fast path) fires an `--every
1m` loop whose due time is a few seconds ahead, as the next minute's tick
would find it (issue 51, item 18); a `--every 90s` loop it leaves alone."""

from __future__ import annotations

import time

from conftest import CLI, agent_command, wait_for


def test_a_tick_a_few_seconds_early_fires_a_whole_minute_interval(cli: CLI) -> None:
    for name, every in (("minute", "1m"), ("odd", "90s")):
        cli("start", "p", "--name", name, "--every", every, "--command", agent_command(),
            check=0)
    cli("tick", "--quiet", check=0)
    wait_for(lambda: all(len(cli.records(n)) == 1 and cli.records(n)[0].get("outcome")
                         for n in ("minute", "odd")))
    loops = wait_for(lambda: (s := cli.state()["loops"]) and not any(
        e["run"] for e in s.values()) and s)
    # The next minute's tick, as cron starts it: 10 s before `minute` is due.
    offset = loops["minute"]["next_due"] - 10 - time.time()
    cli("tick", "--quiet", env={"LOOPCTL_CLOCK_OFFSET": str(offset)}, check=0)
    wait_for(lambda: len(cli.records("minute")) == 2)
    # 10 s before `odd` is due (`minute` ran just now: not due again).
    offset = loops["odd"]["next_due"] - 10 - time.time()
    cli("tick", "--quiet", env={"LOOPCTL_CLOCK_OFFSET": str(offset)}, check=0)
    assert len(cli.records("odd")) == 1 and "odd" not in running(cli)


def running(cli: CLI) -> list[str]:
    return [name for name, entry in cli.state()["loops"].items() if entry["run"]]
