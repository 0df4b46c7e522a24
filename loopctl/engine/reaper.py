"""No process a run started outlives it (DESIGN §14).

Three mechanisms, because each alone has a hole:
- PR_SET_PDEATHSIG in the agent (set between fork and exec): the agent dies
  with its supervisor, even by SIGKILL. It covers the direct child only.
- The supervisor is a subreaper (procs.become_subreaper): while it lives,
  every orphaned descendant (double-forked, setsid) is re-parented to it, so
  `finish` finds them all among its descendants. A subreaper that died
  cannot reap: its orphans go to init.
- A cgroup v2 per run, where this process may create one (root, or a
  delegated user cgroup): every descendant stays a member whatever it does
  with sessions and parents, and `cgroup.kill` kills them all in the kernel,
  forks in flight included. The next driver kills what a SIGKILLed
  supervisor left through it. It is a group of two leaves, the agent's and
  the supervisor's own: the parent of the agent's cgroup is the run's, not
  the one the supervisor came from (shared with the driver and the user),
  so an agent that writes itself into its parent is still swept. Writing
  itself anywhere else is what the scope-only Landlock domain of an
  unconfined run (engine/containment/scope.py) and the sandbox deny. The
  cgroup itself (its layout, creation, limits, removal) is
  engine/containment/cgroup.py; this module kills what is in it. Where no cgroup
  can be made, the next driver finds them by the per-run marker in their
  environment ($LOOPCTL_RUN_MARK): an agent that scrubs its children's
  environment defeats that one, which is why the cgroup comes first.

Measured on this machine (kernel 6.18, cgroup2 at /sys/fs/cgroup/unified):
a forker whose children ignore SIGTERM, double-fork and setsid left 40-130
processes after two psutil snapshots; `cgroup.kill` and the kill-until-empty
loop below leave none (tests/engine/test_containment.py).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from loopctl.engine import procs
from loopctl.engine.containment.cgroup import (
    CGROUP_PREFIX,
    LEAVES,
    Containment,
    base_cgroup,
    cgroup_pids,
    is_run_cgroup,
    move_self,
    remove_tree,
    subtree,
    tree_pids,
)
from loopctl.fast.digests import sha256_hex

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

MARK_VAR = "LOOPCTL_RUN_MARK"
PR_SET_PDEATHSIG = 1
# A kill-until-empty loop ends: each round SIGKILLs every process found, and
# a killed process forks no more; the bound only stops a kernel that lies.
KILL_ROUNDS = 500
FINISH_TIMEOUT = 10.0


def home_key(state_dir: Path) -> str:
    """Tells this home's runs from another home's with the same run ids."""
    return sha256_hex(str(state_dir).encode())[:16]


def run_mark(state_dir: Path, loop: str, run_id: str) -> str:
    return f"{home_key(state_dir)}/{loop}/{run_id}"


# -- what is in a run's cgroup ----------------------------------------------------


def kill_cgroup(folder: str, deadline: float, refuge: str | None = None,
                remove: bool = True) -> set[int]:
    """Kill every member of `folder` and the cgroups below it (the kernel's
    cgroup.kill where present, else by pid until empty), wait until it is
    empty, remove it (unless `remove` is False). Returns the pids. This
    process, if an agent moved it in, steps out to `refuge` (default: the
    parent) first."""
    members = set(tree_pids(folder))
    if os.getpid() in members:
        # Moved in by an agent running as root: step out before killing all.
        if not move_self(refuge or os.path.dirname(folder)):
            return members  # better a survivor than killing ourselves
        members.discard(os.getpid())
    try:
        with open(os.path.join(folder, "cgroup.kill"), "w") as handle:
            handle.write("1")
    except OSError:
        members |= kill_until_empty(lambda: tree_pids(folder), deadline)
    while tree_pids(folder) and time.monotonic() < deadline:
        procs.reap()
        time.sleep(0.005)
    if remove:
        remove_tree(folder)
    return members


# -- processes found otherwise -----------------------------------------------------


def kill_until_empty(find: Callable[[], list[int]], deadline: float) -> set[int]:
    """SIGKILL everything `find` returns, again, until it returns nothing."""
    killed: set[int] = set()
    for _ in range(KILL_ROUNDS):
        found = [p for p in find() if p != os.getpid()]
        if not found or time.monotonic() > deadline:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except OSError:
                pass
        procs.reap()
        time.sleep(0.001)
    return killed


def living_descendants() -> list[int]:
    """Children and below of this (subreaper) process, zombies left out."""
    out = []
    for proc in procs.descendants():
        try:
            if proc.status() != "zombie":
                out.append(proc.pid)
        except Exception:  # psutil.Error; gone meanwhile
            continue
    return out


def marked(mark: str) -> list[int]:
    """Processes of this user whose environment carries the run's marker."""
    needle = f"\0{MARK_VAR}={mark}\0".encode()
    uid = os.getuid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid != uid:
                continue
            with open(f"/proc/{name}/environ", "rb") as handle:
                env = b"\0" + handle.read() + b"\0"
        except OSError:
            continue
        if needle in env:
            found.append(int(name))
    return found


# -- the two callers ------------------------------------------------------------


def child_setup(parent: int, procs_fd: int | None,
                nice: int | None = None) -> Callable[[], None]:
    """The agent's pre-exec step: join the run's cgroup, take the loop's
    niceness, die with the supervisor. If the supervisor died before the
    prctl, exit at once."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def setup() -> None:
        if procs_fd is not None:
            os.write(procs_fd, b"0")
        # Never lower: an unprivileged process may only raise its niceness,
        # and a driver already run under `nice` keeps its own.
        if nice is not None and nice > os.getpriority(os.PRIO_PROCESS, 0):
            os.setpriority(os.PRIO_PROCESS, 0, nice)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(137)

    return setup


def finish(held: Containment | None) -> set[int]:
    """At the end of a run, in its supervisor: kill what is left, by the
    cgroup and by descent, until nothing is. Returns the pids it killed."""
    deadline = time.monotonic() + FINISH_TIMEOUT
    killed: set[int] = set()
    if held is not None and held.cgroup is not None:
        # Kept: the check runs in it after the agent; `release` removes it.
        killed |= kill_cgroup(held.cgroup, deadline, held.supervisor or held.home,
                              remove=held.group is None)
    killed |= kill_until_empty(living_descendants, deadline)
    procs.reap()
    return killed


def release(held: Containment | None) -> None:
    """The run's cgroup goes with the run: the supervisor goes back where it
    came from, whatever is left in the run's group (a process an agent
    moved there) is killed, and the group removed. A run that never
    started its agent (not found, a refused sandbox, a gate that said
    skip) never reached `finish`; its empty cgroup goes the same way."""
    if held is None or held.cgroup is None:
        return
    if held.group is None:  # made before the run had a group of its own
        try:
            os.rmdir(held.cgroup)
        except OSError:
            pass
        return
    deadline = time.monotonic() + FINISH_TIMEOUT
    if held.supervisor is not None and not (held.home and move_self(held.home)):
        # Cannot go back (its home took on controllers meanwhile): the
        # supervisor's leaf and the group stay until it exits, empty.
        kill_cgroup(held.cgroup, deadline, held.supervisor)
        return
    held.supervisor = None
    kill_cgroup(held.group, deadline)


def sweep_lost(state_dir: Path, loop: str, run: dict[str, Any]) -> int:
    """In the driver that finds a run lost: kill what its dead supervisor
    left, through the cgroup it recorded and by the run's marker."""
    deadline = time.monotonic() + FINISH_TIMEOUT
    killed: set[int] = set()
    mark = run_mark(state_dir, loop, run["run_id"])
    held = run.get("contain")
    recorded = (held.get("group") or held.get("cgroup")) if isinstance(held, dict) else None
    # A supervisor killed before it recorded its cgroup (an agent that kills
    # it at once) made it where this driver would: look there too, or a
    # child that scrubbed its environment escapes and the folder stays.
    base, _ = base_cgroup()
    expected = os.path.join(base, CGROUP_PREFIX + mark.replace("/", ".")) if base else None
    supervisor = (run.get("supervisor") or {}).get("pid")
    for folder in dict.fromkeys((recorded, expected)):
        if isinstance(folder, str) and os.path.isdir(folder) and is_run_cgroup(folder):
            killed |= kill_group(folder, deadline, supervisor)
    killed |= kill_until_empty(lambda: marked(mark), deadline)
    return len(killed)


def kill_group(folder: str, deadline: float, spare: object) -> set[int]:
    """A lost run's group, whole: its agent's leaf, what an agent moved into
    the group or the supervisor's leaf. Only the recorded supervisor, if it
    is still in its own leaf (a driver misled into taking a live one for
    dead), is spared: it records its run and removes the group itself."""
    leaf = os.path.join(folder, CGROUP_PREFIX + LEAVES[1])
    if not isinstance(spare, int) or spare not in cgroup_pids(leaf):
        return kill_cgroup(folder, deadline)
    killed: set[int] = set()
    for cgroup in subtree(folder)[1:]:
        if cgroup != leaf and os.path.dirname(cgroup) == folder:
            killed |= kill_cgroup(cgroup, deadline)
    return killed | kill_until_empty(
        lambda: [p for p in cgroup_pids(folder) + tree_pids(leaf) if p != spare], deadline)
