"""Process identity without psutil (/proc, as psutil computes it), and the
cheap "any children left?" check that must never reap a child itself."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil

from loopctl.engine import procs


def test_create_time_matches_psutil_and_alive_tells_reuse_from_life() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        mine = procs.ref(child.pid)
        assert abs(mine["ct"] - psutil.Process(child.pid).create_time()) < 0.01
        assert procs.alive(mine)
        assert not procs.alive({"pid": child.pid, "ct": mine["ct"] - 5})  # a reused pid
    finally:
        child.kill()
        child.wait()
    assert not procs.alive(mine)
    assert not procs.alive({"pid": "1; rm", "ct": 0})


def test_a_zombie_is_not_alive() -> None:
    child = subprocess.Popen(["true"])
    me = procs.ref(child.pid)
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped
    assert not procs.alive(me)
    child.wait()


_NEVER_REAPS = """
import os, subprocess
from loopctl.engine import procs
assert not procs.has_children()
child = subprocess.Popen(["sh", "-c", "exit 7"])
os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
assert procs.has_children()
procs.descendants()  # takes the psutil path: a child is left
assert child.wait() == 7, "reaped behind Popen's back"  # else Popen says 0
assert not procs.has_children()
print("ok")
"""


def test_has_children_never_reaps_an_exit_status() -> None:
    # In a fresh interpreter: a pytest worker may still hold another test's
    # children, and "no children at first" is part of what is checked.
    proc = subprocess.run([sys.executable, "-c", _NEVER_REAPS], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr
