"""An unconfined agent (`--command` under `auto`) tries to leave its process
bounds (DESIGN §14): it writes its pid into the parent of its cgroup (and
into the cgroup its supervisor came from), drops $LOOPCTL_RUN_MARK from a
child it starts, and SIGKILLs its supervisor. With Landlock the move and
the kill are refused; without it, the parent it moved into is the run's
own group, which the next driver kills whole: either way no child of the
run outlives it.

Real supervisors, drivers and cgroups (the process must be able to make a
cgroup v2 here: root, or a delegated one).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from faults.support import gone
from process_support import kill_leftovers, pids_in

from conftest import CLI, wait_for
from loopctl.engine import reaper
from loopctl.engine.containment import cgroup, landlock

HAS_CGROUP = cgroup.base_cgroup()[0] is not None
pytestmark = pytest.mark.skipif(not HAS_CGROUP, reason="no writable cgroup v2 here")


def landlock_abi() -> int:
    try:
        return landlock.abi()
    except landlock.LandlockError:
        return 0


@pytest.fixture(autouse=True)
def reap(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftovers(tmp_path)
    for pid in pids_in(tmp_path / "child"):
        if not gone(pid):
            os.kill(pid, signal.SIGKILL)


def cgroup_of(pid: int) -> str:
    with open(f"/proc/{pid}/cgroup") as handle:
        return next(line for line in handle if line.startswith("0::"))[3:].strip()


def escaper(tmp_path: Path, to_home: bool) -> Path:
    """The agent: leave the run's cgroup for its parent (and with `to_home`
    for the cgroup the supervisor came from), then start an unmarked
    child, then kill the supervisor; what worked goes to `report`."""
    mount = next(m for m in cgroup.cgroup2_mounts() if os.path.isfile(f"{m}/cgroup.procs"))
    home = f' "{cgroup.own_cgroup() or mount}"' if to_home else ""
    report, child = tmp_path / "report", tmp_path / "child"
    script = tmp_path / "escape.sh"
    script.write_text(
        "#!/bin/sh\n"
        "own=$(grep '^0::' /proc/self/cgroup | cut -d: -f3)\n"
        f"for target in \"{mount}$(dirname \"$own\")\"{home}; do\n"
        f"  if echo $$ > \"$target/cgroup.procs\"; then echo \"moved $target\" >> {report}\n"
        f"  else echo \"move denied $target\" >> {report}; fi\n"
        "done\n"
        f"env -u LOOPCTL_RUN_MARK sleep 300 & echo $! > {child}\n"
        f"if kill -9 $PPID; then echo killed >> {report}; else echo kill denied >> {report}; fi\n"
        "sleep 300\n")
    script.chmod(0o700)
    return script


def start_escaper(cli: CLI, tmp_path: Path, to_home: bool) -> None:
    cli("start", "p", "--name", "esc", "--every", "1h", "--timeout", "1m",
        "--command", str(escaper(tmp_path, to_home)), check=0)


@pytest.mark.skipif(landlock_abi() < 6, reason="needs Landlock ABI 6 (scoped signals)")
def test_an_unconfined_agent_can_neither_leave_its_cgroup_nor_kill_its_supervisor(
        cli: CLI, tmp_path: Path) -> None:
    start_escaper(cli, tmp_path, to_home=True)
    cli("tick", check=0)
    wait_for(lambda: "kill" in (tmp_path / "report").read_text()
             if (tmp_path / "report").exists() else False)
    report = (tmp_path / "report").read_text().splitlines()
    assert [line.split()[0:2] for line in report] == [["move", "denied"]] * 2 + [
        ["kill", "denied"]], report
    # The agent can report before its supervisor has written the launch to the
    # state (it is spawned inside the store lock, the state saved after).
    run = wait_for(lambda: (r := cli.state()["loops"]["esc"]["run"]) and "contain" in r and r)
    assert not gone(run["supervisor"]["pid"])
    # The supervisor sits in a leaf of its own beside the agent's, in the run's group.
    group = run["contain"]["group"]
    assert cgroup_of(run["supervisor"]["pid"]).endswith(
        "/" + os.path.basename(group) + "/loopctl-supervisor")
    assert cgroup_of(run["agent"]["pid"]) == cgroup_of(run["supervisor"]["pid"]).replace(
        "/loopctl-supervisor", "/loopctl-run")
    cli("stop", "esc", "--kill", check=0)  # the agent sleeps: end the run as a user would
    (record,) = wait_for(lambda: cli.records("esc"), timeout=30)
    (child,) = pids_in(tmp_path / "child")
    assert gone(child), "the agent's unmarked child outlived its run"
    assert record["sandbox"] == "off" and record["outcome"] != "lost", record
    log = cli("logs", "esc").stdout
    assert "signals scoped to the run and no cgroup file writable" in log


def test_without_landlock_the_parent_an_agent_moves_into_is_its_runs_own_group(
        cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No Landlock (as on an older kernel): the move and the kill succeed.
    The parent of the agent's cgroup is the run's group, not the cgroup its
    supervisor came from, so the next driver finds the child there."""
    monkeypatch.setenv("LOOPCTL_SANDBOX_ABI", "0")
    # Not to the driver's own cgroup: from there (a cgroup the user's shell
    # shares) only Landlock, above, keeps an agent that runs as root.
    start_escaper(cli, tmp_path, to_home=False)
    cli("tick", check=0)
    run = wait_for(lambda: cli.state()["loops"]["esc"].get("run"))
    wait_for(lambda: gone(run["supervisor"]["pid"]))
    (child,) = wait_for(lambda: pids_in(tmp_path / "child"))
    report = (tmp_path / "report").read_text()
    assert report.startswith("moved "), report  # and killed it: the agent died with it
    assert not gone(child)
    assert cli.json("tick")["lost"] == [run["run_id"]]
    assert gone(child), "the child in the run's group outlived the lost run"
    mark = reaper.run_mark(cli.state_dir, "esc", run["run_id"]).replace("/", ".")
    assert not os.path.exists(os.path.join(cgroup.base_cgroup()[0] or "",
                                           cgroup.CGROUP_PREFIX + mark))


def test_the_rules_cover_everything_but_the_cgroup_mounts(tmp_path: Path) -> None:
    from loopctl.engine.containment.scope import writable_entries

    tmp_path = tmp_path / "root"  # a tree of its own, as `/` is

    for folder in ("a", "sys/fs/cgroup/unified", "sys/fs/fuse", "sys/kernel"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "file").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "sys" / "fs" / "cgroup")
    got = writable_entries([str(tmp_path / "sys/fs/cgroup")], root=str(tmp_path))
    assert sorted(got) == sorted(str(tmp_path / p) for p in
                                 ("a", "file", "sys/fs/fuse", "sys/kernel"))


@pytest.mark.skipif(landlock_abi() < 2, reason="needs Landlock ABI 2")
def test_an_unconfined_run_still_writes_moves_and_links_where_it_could(
        cli: CLI, tmp_path: Path) -> None:
    """The domain denies only cgroup files: files are written, moved to
    another folder and linked anywhere the user could (not copied: a
    rename across folders, which any Landlock domain refuses unless granted)."""
    work = tmp_path / "work"
    work.mkdir()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    script = ("import os; open('a.txt', 'w').write('x'); "
              f"os.rename('a.txt', {str(outside / 'a.txt')!r}); "
              f"os.link({str(outside / 'a.txt')!r}, 'b.txt'); open('done', 'w')")
    cli("start", "p", "--name", "mine", "--every", "1h", "--cwd", str(work),
        "--command", f"python3 -c \"{script}\"", check=0)
    cli("run", "mine", check=0)
    assert (work / "done").exists() and (outside / "a.txt").read_text() == "x"
    assert "no cgroup file writable" in cli("logs", "mine").stdout


@pytest.mark.skipif(landlock_abi() < 6, reason="needs Landlock ABI 6 (scoped signals)")
def test_an_agent_whose_own_sandbox_needs_mounts_gets_no_scope(
        cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """codex builds its sandbox with bubblewrap (mount namespaces), which no
    process in a Landlock domain may make: run unconfined (`--sandbox off`
    keeps codex's own sandbox), it is not scoped, and the log says so."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "codex").write_text(f"#!/bin/sh\nkill -0 $PPID && echo unscoped > {tmp_path}/seen\n")
    (bin_dir / "codex").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    cli("start", "p", "--name", "cx", "--every", "1h", "--command", "codex exec hi", check=0)
    cli("run", "cx")
    assert (tmp_path / "seen").read_text() == "unscoped\n"
    assert "codex's own sandbox needs mount(2)" in cli("logs", "cx").stdout
