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
  unconfined run (engine/scope.py) and the sandbox deny. Where no cgroup
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

from loopctl.domain.data_class import record
from loopctl.domain.digests import sha256_hex
from loopctl.engine import procs

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

MARK_VAR = "LOOPCTL_RUN_MARK"
PR_SET_PDEATHSIG = 1
# A kill-until-empty loop ends: each round SIGKILLs every process found, and
# a killed process forks no more; the bound only stops a kernel that lies.
KILL_ROUNDS = 500
FINISH_TIMEOUT = 10.0
CGROUP_PREFIX = "loopctl-"


@record
class Containment:
    """How one run's processes are held: `cgroup` (the cgroup v2 directory
    its agent, gate and check join) or None, with the reason in `why_not`;
    `mark` is always set. `group` is the run's own cgroup holding that leaf
    and the supervisor's (`supervisor`), and `home` the cgroup the
    supervisor came from and goes back to."""
    mark: str
    cgroup: str | None = None
    why_not: str | None = None
    group: str | None = None
    supervisor: str | None = None
    home: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"mark": self.mark, "cgroup": self.cgroup, "group": self.group}


def home_key(state_dir: Path) -> str:
    """Tells this home's runs from another home's with the same run ids."""
    return sha256_hex(str(state_dir).encode())[:16]


def run_mark(state_dir: Path, loop: str, run_id: str) -> str:
    return f"{home_key(state_dir)}/{loop}/{run_id}"


# -- cgroup v2 ------------------------------------------------------------------


def cgroup2_mounts() -> list[str]:
    try:
        with open("/proc/self/mounts") as handle:
            return [line.split()[1] for line in handle if line.split()[2:3] == ["cgroup2"]]
    except OSError:
        return []


def own_cgroup() -> str | None:
    """This process's cgroup v2 directory (the `0::` line), or None."""
    try:
        with open("/proc/self/cgroup") as handle:
            line = next((x for x in handle if x.startswith("0::")), None)
    except OSError:
        return None
    if line is None:
        return None
    rel = line[3:].strip().lstrip("/")
    for mount in cgroup2_mounts():
        folder = os.path.join(mount, rel) if rel else mount
        if os.path.isfile(os.path.join(folder, "cgroup.procs")):
            return folder
    return None


def base_cgroup() -> tuple[str | None, str]:
    """Where this process may create run cgroups, or (None, why not)."""
    if os.environ.get("LOOPCTL_CGROUP") == "off":
        return None, "turned off by LOOPCTL_CGROUP=off"
    folder = own_cgroup()
    if folder is None:
        return None, "no cgroup v2 hierarchy is mounted"
    if not os.access(folder, os.W_OK):
        return None, f"cgroup {folder} is not delegated to this user"
    return folder, ""


def contain(state_dir: Path, loop: str, run_id: str) -> Containment:
    """A fresh cgroup for the run where one can be made (never fails): the
    run's group with two leaves, one its agent (and gate, check) joins, one
    the supervisor moves into. An agent that writes itself into the
    parent of its cgroup lands in the run's group, which the next driver
    kills whole when the supervisor is gone; the supervisor's own cgroup,
    which holds the driver and the user's shell, is not that parent."""
    mark = run_mark(state_dir, loop, run_id)
    base, why = base_cgroup()
    if base is None:
        return Containment(mark, None, why)
    _enable_controllers(base)
    group = os.path.join(base, CGROUP_PREFIX + mark.replace("/", "."))
    agent, supervisor = (os.path.join(group, CGROUP_PREFIX + leaf) for leaf in LEAVES)
    try:
        for folder in (group, agent, supervisor):
            try:
                os.mkdir(folder, 0o755)
            except FileExistsError:
                pass
    except OSError as exc:
        _remove_tree(group)
        return Containment(mark, None, f"cannot create a cgroup in {base}: {exc.strerror}")
    held = Containment(mark, agent, None, group, None, base)
    if _move_self(supervisor):
        held.supervisor = supervisor
    _enable_controllers(group)  # it holds no process itself: the leaves get them
    return held


LEAVES = ("run", "supervisor")


def _move_self(folder: str) -> bool:
    try:
        with open(os.path.join(folder, "cgroup.procs"), "w") as handle:
            handle.write("0")
    except OSError:
        return False
    return True


def _words(path: str) -> set[str]:
    try:
        with open(path) as handle:
            return set(handle.read().split())
    except OSError:
        return set()


LIMITS = {"memory": ("memory.max", "--max-memory"), "pids": ("pids.max", "--max-procs")}


def limits_here() -> dict[str, str | None]:
    """For each bound a run cgroup can carry: None when this machine can
    enforce it, else why not (for `start` and `doctor`)."""
    base, why = base_cgroup()
    if base is None:
        return dict.fromkeys(LIMITS, why)
    usable = _words(os.path.join(base, "cgroup.subtree_control")) \
        | _words(os.path.join(base, "cgroup.controllers"))
    return {name: None if name in usable else
            f"the {name} controller is not enabled in cgroup v2 at {base}" for name in LIMITS}


def unenforceable(max_memory: object, max_procs: object) -> list[str]:
    """One line per bound asked for that this machine cannot enforce."""
    here = limits_here()
    asked = {"memory": max_memory, "pids": max_procs}
    return [f"{LIMITS[name][1]} cannot be enforced here: {why}"
            for name, why in here.items() if asked[name] is not None and why]


def apply_limits(held: Containment, max_memory: int | None,
                 max_procs: int | None) -> list[str]:
    """Write the run cgroup's memory.max and pids.max; notes for what could not be."""
    notes = []
    for name, value in (("memory", max_memory), ("pids", max_procs)):
        if value is None:
            continue
        filename, option = LIMITS[name]
        try:
            if held.cgroup is None:
                raise OSError(0, held.why_not or "no cgroup")
            with open(os.path.join(held.cgroup, filename), "w") as handle:
                handle.write(str(value))
        except OSError as exc:
            notes.append(f"{option} not enforced: {exc.strerror}")
    return notes


def _enable_controllers(base: str) -> None:
    """Hand memory and pids down to run cgroups where the base has them;
    refused (EBUSY) where the base holds processes itself: limits_here says so."""
    wanted = (_words(os.path.join(base, "cgroup.controllers")) & set(LIMITS)) \
        - _words(os.path.join(base, "cgroup.subtree_control"))
    if not wanted:
        return
    try:
        with open(os.path.join(base, "cgroup.subtree_control"), "w") as handle:
            handle.write(" ".join(f"+{name}" for name in sorted(wanted)))
    except OSError:
        pass


def is_run_cgroup(folder: object) -> bool:
    """A path from state that names a run cgroup loopctl made: a damaged
    state.json must not make a driver kill some other cgroup."""
    if not isinstance(folder, str) or not os.path.basename(folder).startswith(CGROUP_PREFIX):
        return False
    real = os.path.realpath(folder)
    return real == folder and any(real.startswith(m.rstrip("/") + "/") for m in cgroup2_mounts())


def cgroup_pids(folder: str) -> list[int]:
    try:
        with open(os.path.join(folder, "cgroup.procs")) as handle:
            return [int(x) for x in handle.read().split()]
    except (OSError, ValueError):
        return []


MAX_CGROUPS = 256  # a run's cgroup and what was made below it; a bound, not a limit met


def subtree(folder: str) -> list[str]:
    """`folder` and the cgroups below it (an agent allowed to may make
    some), parents first; symlinks are not followed (cgroupfs has none)."""
    found = [folder]
    for here in found:
        if len(found) >= MAX_CGROUPS:
            break
        try:
            found += sorted(e.path for e in os.scandir(here)
                            if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
    return found[:MAX_CGROUPS]


def tree_pids(folder: str) -> list[int]:
    return [pid for cgroup in subtree(folder) for pid in cgroup_pids(cgroup)]


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
        if not _move_self(refuge or os.path.dirname(folder)):
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
        _remove_tree(folder)
    return members


def _remove_tree(folder: str) -> None:
    for cgroup in reversed(subtree(folder)):
        try:
            os.rmdir(cgroup)
        except OSError:
            pass


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


def open_procs(held: Containment) -> int | None:
    if held.cgroup is None:
        return None
    try:
        return os.open(os.path.join(held.cgroup, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return None


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
    if held.supervisor is not None and not (held.home and _move_self(held.home)):
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
