"""What a run is given is readable by the run (DESIGN §14): the payload of
the trigger it answers, at $LOOPCTL_TRIGGER_FILE, opens in a confined
`--command` agent, its gate (`--if`) and its check (`--check`), in a
`shell` loop with `--sandbox on` and in a `--raw` preset run (confined by
`auto`). Each reads loopctl's own copy, which none of them can change.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest

from conftest import CLI
from loopctl.engine.containment import sandbox

pytestmark = pytest.mark.skipif(sandbox.available()[1] is not None,
                                reason="no Landlock here")

PAYLOAD = '{"pr": 7, "title": "given to the run"}'
READER = """
import os, sys
who = sys.argv[1]
try:
    with open(os.environ["LOOPCTL_TRIGGER_FILE"]) as handle:
        seen = handle.read()
except (KeyError, OSError) as exc:
    seen = f"unreadable: {exc!r}"
try:
    with open(os.environ["LOOPCTL_TRIGGER_FILE"], "a") as handle:
        handle.write("changed by " + who)
    seen += " (and writable)"
except OSError:
    pass
with open(who + ".txt", "w") as handle:
    handle.write(seen)
"""


def trigger(cli: CLI, name: str, tmp_path: Path) -> None:
    payload = tmp_path / "payload.json"
    payload.write_text(PAYLOAD)
    cli("trigger", name, "--payload", str(payload), check=0)
    cli("tick", "--wait")  # the fake claude's run fails (it prints no result): no matter


def workdir(tmp_path: Path) -> tuple[Path, str]:
    work = tmp_path / "work"
    work.mkdir()
    (work / "reader.py").write_text(READER)
    return work, shlex.join([sys.executable, str(work / "reader.py")])


def test_a_confined_command_its_gate_and_its_check_read_the_payload(
        cli: CLI, tmp_path: Path) -> None:
    work, reader = workdir(tmp_path)
    cli("start", "p", "--name", "given", "--on-demand", "--cwd", str(work), "--sandbox", "on",
        "--command", f"{reader} agent", "--if", f"{reader} gate",
        "--check", f"{reader} check", check=0)
    trigger(cli, "given", tmp_path)
    (record,) = cli.records("given")
    assert record["sandbox"].startswith("landlock ABI "), record
    for who in ("gate", "agent", "check"):
        assert (work / f"{who}.txt").read_text() == PAYLOAD, who


def test_a_confined_shell_loop_and_a_raw_preset_read_the_payload(
        cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work, reader = workdir(tmp_path)
    cli("start", f"{reader} shell", "--name", "sh", "--on-demand", "--cwd", str(work),
        "--sandbox", "on", check=0)
    trigger(cli, "sh", tmp_path)
    bin_dir = tmp_path / "bin"  # a claude that only reads what it was given
    bin_dir.mkdir()
    fake = bin_dir / "claude"
    fake.write_text(f"#!/bin/sh\nexec {reader} raw\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    cli("start", "the objective", "--name", "raw", "--agent", "claude", "--raw",
        "--on-demand", "--cwd", str(work), check=0)
    trigger(cli, "raw", tmp_path)
    (record,) = cli.records("raw")
    assert record["sandbox"].startswith("landlock ABI "), record
    assert (work / "shell.txt").read_text() == PAYLOAD
    assert (work / "raw.txt").read_text() == PAYLOAD
