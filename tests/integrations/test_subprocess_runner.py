"""The one bounded subprocess runner (integrations/subprocess_runner.py):
its deadline kills the whole group, grandchildren included; output is kept
to its bound and says so; argv never goes through a shell; the child sees
the environment it is given and nothing else."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import psutil

from loopctl.integrations import subprocess_runner as runner

DUMP_ENV = "import os, json; print(json.dumps(dict(os.environ)))"


def test_the_deadline_kills_the_group_grandchild_included(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    code = ("import subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            f"open({str(pids)!r}, 'w').write(str(child.pid))\n"
            "time.sleep(60)\n")
    ran = runner.run([sys.executable, "-c", code], env=os.environ, timeout=2, out_limit=100,
                     grace=0.5)
    assert ran.timed_out and ran.exit_code is None and ran.duration_s < 10
    grandchild = int(pids.read_text())
    if psutil.pid_exists(grandchild):
        _, alive = psutil.wait_procs([psutil.Process(grandchild)], timeout=5)
        assert alive == [], "the grandchild outlived the deadline"


def test_output_is_kept_to_its_bound_and_says_so() -> None:
    code = "import sys; sys.stdout.write('a' * 100 + 'z' * 5_000_000); sys.stdout.flush()"
    head = runner.run([sys.executable, "-c", code], env=os.environ, timeout=20, out_limit=100)
    assert head.out == b"a" * 100 and head.truncated and head.exit_code == 0
    tail = runner.run([sys.executable, "-c", code], env=os.environ, timeout=20, out_limit=10,
                      keep_tail=True)
    assert tail.out == b"z" * 10 and tail.truncated
    small = runner.run([sys.executable, "-c", "print('ok')"], env=os.environ, timeout=20,
                       out_limit=100)
    assert small.out == b"ok\n" and not small.truncated


def test_argv_never_goes_through_a_shell(tmp_path: Path) -> None:
    marker = tmp_path / "shell-ran"
    ran = runner.run(["echo", f"$(touch {marker}); x"], env=os.environ, timeout=10,
                     out_limit=1000)
    assert ran.out == f"$(touch {marker}); x\n".encode()
    assert not marker.exists()


def test_the_child_sees_only_the_environment_given() -> None:
    os.environ["LOOPCTL_TEST_LEAK"] = "leaked"
    try:
        ran = runner.run([sys.executable, "-c", DUMP_ENV],
                         env={"ONLY": "this", "PATH": os.environ["PATH"]}, timeout=10,
                         out_limit=100_000)
    finally:
        del os.environ["LOOPCTL_TEST_LEAK"]
    import json

    seen = json.loads(ran.out)
    assert seen.get("ONLY") == "this" and "LOOPCTL_TEST_LEAK" not in seen


def test_stdin_larger_than_a_pipe_does_not_deadlock() -> None:
    code = "import sys; d = sys.stdin.buffer.read(); print(len(d))"
    ran = runner.run([sys.executable, "-c", code], env=os.environ, timeout=20,
                     stdin=b"x" * 500_000, out_limit=100)
    assert ran.out == b"500000\n" and not ran.timed_out


def test_a_signal_is_reported_as_one() -> None:
    ran = runner.run(["sh", "-c", "kill -9 $$"], env=os.environ, timeout=10, out_limit=10)
    assert ran.signal == 9 and ran.exit_code is None and ran.status == 137
