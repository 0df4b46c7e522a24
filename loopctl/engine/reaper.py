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
  supervisor left through it. Where no cgroup can be made, the next driver
  finds them by the per-run marker in their environment ($LOOPCTL_RUN_MARK):
  an agent that scrubs its children's environment defeats that one, which
  is why the cgroup comes first.

Measured on this machine (kernel 6.18, cgroup2 at /sys/fs/cgroup/unified):
a forker whose children ignore SIGTERM, double-fork and setsid left 40-130
processes after two psutil snapshots; `cgroup.kill` and the kill-until-empty
loop below leave none (tests/test_containment.py).
"""

from __future__ import annotations

import hashlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loopctl.domain.plain import record
from loopctl.engine import procs

MARK_VAR = "LOOPCTL_RUN_MARK"
PR_SET_PDEATHSIG = 1
# A kill-until-empty loop ends: each round SIGKILLs every process found, and
# a killed process forks no more; the bound only stops a kernel that lies.
KILL_ROUNDS = 500
FINISH_TIMEOUT = 10.0
CGROUP_PREFIX = "loopctl-"


@record
class Containment:
    """How one run's processes are held: `cgroup` (a directory of a cgroup v2
    hierarchy) or None, with the reason in `why_not`; `mark` is always set."""
    mark: str
    cgroup: str | None = None
    why_not: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"mark": self.mark, "cgroup": self.cgroup}


def home_key(state_dir: Path) -> str:
    """Tells this home's runs from another home's with the same run ids."""
    return hashlib.sha256(str(state_dir).encode()).hexdigest()[:16]


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
    """A fresh cgroup for the run where one can be made (never fails)."""
    mark = run_mark(state_dir, loop, run_id)
    base, why = base_cgroup()
    if base is None:
        return Containment(mark, None, why)
    _enable_controllers(base)
    folder = os.path.join(base, CGROUP_PREFIX + mark.replace("/", "."))
    try:
        os.mkdir(folder, 0o755)
    except FileExistsError:
        pass
    except OSError as exc:
        return Containment(mark, None, f"cannot create a cgroup in {base}: {exc.strerror}")
    return Containment(mark, folder)


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


def kill_cgroup(folder: str, deadline: float) -> set[int]:
    """Kill every member (the kernel's cgroup.kill where present, else by
    pid until empty), wait until it is empty, remove it. Returns the pids."""
    members = set(cgroup_pids(folder))
    if os.getpid() in members:
        # Moved in by an agent running as root: step out before killing all.
        try:
            with open(os.path.join(os.path.dirname(folder), "cgroup.procs"), "w") as handle:
                handle.write("0")
        except OSError:
            return members  # better a survivor than killing ourselves
        members.discard(os.getpid())
    try:
        with open(os.path.join(folder, "cgroup.kill"), "w") as handle:
            handle.write("1")
    except OSError:
        members |= kill_until_empty(lambda: cgroup_pids(folder), deadline)
    while cgroup_pids(folder) and time.monotonic() < deadline:
        procs.reap()
        time.sleep(0.005)
    try:
        os.rmdir(folder)
    except OSError:
        pass
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
        except Exception:  # noqa: BLE001 - psutil.Error; gone meanwhile
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


def child_setup(parent: int, procs_fd: int | None) -> Callable[[], None]:
    """The agent's pre-exec step: join the run's cgroup, die with the
    supervisor. If the supervisor died before the prctl, exit at once."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def setup() -> None:
        if procs_fd is not None:
            os.write(procs_fd, b"0")
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
        killed |= kill_cgroup(held.cgroup, deadline)
    killed |= kill_until_empty(living_descendants, deadline)
    procs.reap()
    return killed


def release(held: Containment | None) -> None:
    """The run's cgroup goes with the run. `finish` removes it after killing
    what is left; a run that never started its agent (not found, a refused
    sandbox, a gate that said skip) never reaches `finish`, and its empty
    cgroup stayed behind, one per such run. rmdir refuses a cgroup that still
    holds a process, so nothing alive is lost track of."""
    if held is not None and held.cgroup is not None:
        try:
            os.rmdir(held.cgroup)
        except OSError:
            pass


def sweep_lost(state_dir: Path, loop: str, run: dict[str, Any]) -> int:
    """In the driver that finds a run lost: kill what its dead supervisor
    left, through the cgroup it recorded and by the run's marker."""
    deadline = time.monotonic() + FINISH_TIMEOUT
    killed: set[int] = set()
    mark = run_mark(state_dir, loop, run["run_id"])
    held = run.get("contain")
    recorded = held.get("cgroup") if isinstance(held, dict) else None
    # A supervisor killed before it recorded its cgroup (an agent that kills
    # it at once) made it where this driver would: look there too, or a
    # child that scrubbed its environment escapes and the folder stays.
    base, _ = base_cgroup()
    expected = os.path.join(base, CGROUP_PREFIX + mark.replace("/", ".")) if base else None
    for folder in dict.fromkeys((recorded, expected)):
        if isinstance(folder, str) and os.path.isdir(folder) and is_run_cgroup(folder):
            killed |= kill_cgroup(folder, deadline)
    killed |= kill_until_empty(lambda: marked(mark), deadline)
    return len(killed)
