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
from loopctl.engine.containment import privdev, sandbox

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


@pytest.mark.parametrize("how", ["mount", "user"])
def test_both_ways_into_a_namespace_give_the_run_its_own_devices(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """`mount` is how root gets there, `user` how a normal user does (a user
    namespace first, its own ids mapped); each is tried here as the kernel
    lets this process, in a child confined as a run's agent is."""
    if how == "mount" and not privdev._has_sys_admin():
        pytest.skip("needs CAP_SYS_ADMIN")
    if how == "user" and not privdev._userns_allowed():
        pytest.skip("this kernel refuses unprivileged user namespaces")
    import subprocess

    from loopctl.engine.containment import landlock

    monkeypatch.setattr(privdev, "_how", [how])
    ruleset = landlock.Ruleset(landlock.abi())
    for path in ("/usr", "/lib", "/lib64", "/bin", "/etc", "/proc", sys.prefix,
                 sys.base_prefix, os.path.dirname(os.__file__)):
        ruleset.allow(path, landlock.READ)
    ruleset.allow("/dev", landlock.FS_READ_DIR)
    enter = privdev.entering(ruleset)

    def confine() -> None:
        enter()
        ruleset.apply()

    mine = f"/dev/shm/loopctl-test-{how}-{os.getpid()}"
    probe = (f"import os; a, b = os.openpty(); open({mine!r}, 'w').write('x'); "
             "print(os.ttyname(b), len(os.listdir('/dev/shm')), os.getuid())")
    try:
        done = subprocess.run([sys.executable, "-c", probe], preexec_fn=confine,
                              capture_output=True, text=True, timeout=30)
    finally:
        ruleset.close()
    assert done.returncode == 0, done.stderr
    tty, files, uid = done.stdout.split()
    assert tty.startswith("/dev/pts/") and files == "1", done.stdout  # its own, alone
    assert uid == str(os.getuid())  # the same id inside its user namespace
    assert not Path(mine).exists()


def test_agents_and_doctor_say_what_runs_get_here(cli: CLI) -> None:
    status = cli.json("agents")["sandbox"]["status"]
    said = privdev.describe(privdev.possible())
    assert said in status and "unconfined runs: " in status, status
    doctor = cli("doctor").stdout
    assert said in doctor and "no cgroup file writable" in doctor
