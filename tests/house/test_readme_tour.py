"""The README's tour works as written with the `shell` preset alone (issue
51, item 25). Not marked `real_processes`: the commands that only read or
edit loopctl's files run in this process, `run` and `tick` as processes."""

from __future__ import annotations

import re
import shlex

from conftest import CLI, TESTS

README = (TESTS.parent / "README.md").read_text()


def tour_commands() -> list[list[str]]:
    """The tour's lines up to the agent section, as argv without `loopctl`."""
    tour = README.split("## A 60-second tour", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```sh\n(.+?)```", tour, re.S)
    lines = [shlex.split(line, comments=True) for line in block.splitlines()]
    return [argv[1:] for argv in lines if argv and argv[0] == "loopctl"]


def test_the_tour_runs_with_the_shell_preset_alone(cli: CLI) -> None:
    """Every command of the tour does what it says with no AI agent
    installed (issue 51, item 25): `cron install` is left out, as it edits
    the user's crontab, and `doctor` may say that nothing drives the loop."""
    commands = tour_commands()
    assert len(commands) >= 8 and not any("--agent" in argv for argv in commands)
    for argv in commands:
        if argv[:2] == ["cron", "install"]:
            continue
        proc = cli(*argv)
        assert proc.returncode in ((0, 1) if argv[0] == "doctor" else (0,)), (argv, proc)
    assert "Filesystem" in cli("logs", "disk", check=0).stdout
