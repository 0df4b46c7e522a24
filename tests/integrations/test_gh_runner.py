"""The one gh runner (integrations/gh.py): the hand-off steps and PR
feedback both go through it, so what gh prints about the agent's PR is read
within a bound, and a gh that hangs is killed with everything it started."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import psutil
import pytest

from loopctl.integrations import gh
from loopctl.integrations.git import GitError


def fake_gh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "gh"
    script.write_text(f"#!{sys.executable}\nimport os, subprocess, sys, time\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder


def test_a_hanging_gh_is_killed_with_what_it_started(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    pids = tmp_path / "pids"
    fake_gh(tmp_path, monkeypatch, (
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pids)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(60)"))
    with pytest.raises(GitError, match="gh pr ready timed out"):
        gh.gh("pr", "ready", "https://github.com/o/r/pull/7", cwd=str(tmp_path), timeout=1)
    child = int(pids.read_text())
    gone, alive = psutil.wait_procs([psutil.Process(child)], timeout=10) \
        if psutil.pid_exists(child) else ([], [])
    assert alive == [], "the hand-off's gh left a process behind"


def test_what_gh_prints_is_read_within_a_bound(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gh(tmp_path, monkeypatch, (
        "sys.stdout.write('x' * (10 * 2**20) + '\\n')\n"
        "sys.stderr.write('y' * (10 * 2**20) + '\\nerror: the last line\\n')\n"
        "sys.exit(1)"))
    proc = gh.gh("pr", "merge", "https://github.com/o/r/pull/7", "--squash", cwd=str(tmp_path))
    assert proc.returncode == 1
    assert len(proc.stdout) <= gh.MAX_OUTPUT
    assert len(proc.stderr) <= gh.MAX_STDERR * 4 and proc.stderr.endswith("the last line\n")


def test_a_missing_gh_says_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(GitError, match="not on PATH; install it"):
        gh.gh("pr", "ready", "https://github.com/o/r/pull/7", cwd=str(tmp_path))
