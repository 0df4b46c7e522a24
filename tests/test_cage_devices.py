"""A confined agent reaches for other terminals and other runs' shared
memory (DESIGN §14): it opens a terminal of the user's (`/dev/pts/N`, where
a sudo password is typed) and reads a file another run left in `/dev/shm`.
Both are denied. Where a mount namespace can be made, the run has its own
devpts instance and /dev/shm: it opens terminals of its own and shares
memory among its processes, and what it leaves in /dev/shm no one else sees.

Real `loopctl run` supervisors, Landlock, and a pty the test holds open.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import CLI
from loopctl.engine import privdev, sandbox

pytestmark = pytest.mark.skipif(sandbox.available()[1] is not None,
                                reason="no Landlock here")

AGENT = """
import json, os, sys
host_pty, secret, mine, report = sys.argv[1:5]
seen = {}
def attempt(name, action):
    try:
        seen[name] = action()
    except OSError as exc:
        seen[name] = f"denied: {exc.strerror}"
def read_tty():
    fd = os.open(host_pty, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    st = os.fstat(fd)
    return f"opened {os.major(st.st_rdev)}:{os.minor(st.st_rdev)} dev {st.st_dev}"
attempt("user's terminal", read_tty)
attempt("other run's shm", lambda: open(secret).read())
attempt("own shm", lambda: open(mine, "w").write("mine") and "written")
attempt("new terminal", lambda: "made" if os.openpty() else "")
def shared_lock():
    import multiprocessing
    return "made" if multiprocessing.Lock() else ""
attempt("multiprocessing lock", shared_lock)
with open(report, "w") as handle:
    json.dump(seen, handle)
"""


@pytest.fixture
def user_terminal() -> Iterator[str]:
    """A terminal of the user's, open while the run tries it."""
    master, slave = os.openpty()
    try:
        yield os.ttyname(slave)
    finally:
        os.close(master)
        os.close(slave)


@pytest.fixture
def shm_names(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    tag = tmp_path.name + str(os.getpid())
    secret, mine = Path(f"/dev/shm/loopctl-test-{tag}-secret"), Path(f"/dev/shm/loopctl-test-{tag}")
    secret.write_text("SUDO-PASSWORD\n")
    yield secret, mine
    for path in (secret, mine):
        path.unlink(missing_ok=True)


def test_a_confined_agent_has_no_other_terminal_and_no_shared_memory_of_others(
        cli: CLI, tmp_path: Path, user_terminal: str,
        shm_names: tuple[Path, Path]) -> None:
    work = tmp_path / "work"
    work.mkdir()
    script = work / "reach.py"
    script.write_text(AGENT)
    secret, mine = shm_names
    report = work / "report.json"
    argv = [sys.executable, str(script), user_terminal, str(secret), str(mine), str(report)]
    cli("start", "p", "--name", "reach", "--every", "1h", "--cwd", str(work),
        "--sandbox", "on", "--command", shlex.join(argv), check=0)
    cli("run", "reach", check=0)
    seen = json.loads(report.read_text())
    host = os.stat(user_terminal)
    opened = f"opened {os.major(host.st_rdev)}:{os.minor(host.st_rdev)} dev {host.st_dev}"
    assert seen["user's terminal"] != opened, seen
    assert seen["other run's shm"].startswith("denied: "), seen
    assert not mine.exists(), "what the run left in /dev/shm is seen outside it"
    log = cli("logs", "reach").stdout
    if privdev.possible():
        assert seen["user's terminal"].startswith("denied: "), seen
        assert (seen["own shm"], seen["new terminal"], seen["multiprocessing lock"]) == (
            "written", "made", "made"), seen
        assert "/dev/pts and /dev/shm: the run's own" in log
    else:
        assert all(seen[k].startswith("denied: ") for k in seen), seen
        assert "/dev/pts and /dev/shm: not granted" in log
