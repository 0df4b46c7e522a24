"""The one bounded runner (integrations/bounded.py) that gh, hooks, the
notification sender, crontab and `agents` go through: a deadline that kills
the whole session, children included; output kept within its bound however
much comes; stdin fed while output is read, so neither side can stall."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from loopctl.integrations.bounded import run_bounded


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_at_the_deadline_the_whole_session_is_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "child"
    code = ("import os, subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
            "print('started', flush=True)\n"
            "time.sleep(60)\n")
    began = time.monotonic()
    ran = run_bounded(python(code), timeout=2, limit=1024)
    assert ran.timed_out and ran.code is None and ran.out == b"started\n"
    assert time.monotonic() - began < 15
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the grandchild outlived the deadline")


def test_output_is_kept_within_its_bound_head_or_tail() -> None:
    flood = python("import sys\nfor i in range(200000): sys.stdout.write(f'{i}\\n')")
    head = run_bounded(flood, timeout=30, limit=100)
    assert head.code == 0 and head.cut and head.out == b"".join(
        f"{i}\n".encode() for i in range(200000))[:100]
    tail = run_bounded(flood, timeout=30, limit=100, keep_tail=True)
    assert tail.cut and tail.out.endswith(b"199999\n") and len(tail.out) == 100


def test_stdin_is_fed_while_output_is_read() -> None:
    """A program that writes 4 MiB before it reads its 4 MiB of input: with
    input written first and output read after, both pipes would fill."""
    code = ("import sys\nsys.stdout.write('x' * (4 << 20)); sys.stdout.flush()\n"
            "data = sys.stdin.buffer.read()\nprint(len(data))")
    ran = run_bounded(python(code), timeout=30, limit=8 << 20, input=b"y" * (4 << 20))
    assert ran.code == 0 and ran.out.endswith(str(4 << 20).encode() + b"\n")


def test_a_program_that_cannot_start_says_why(tmp_path: Path) -> None:
    assert run_bounded([str(tmp_path / "nope")], timeout=5, limit=10).missing
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    denied = run_bounded([str(script)], timeout=5, limit=10)
    assert denied.denied and denied.code is None
