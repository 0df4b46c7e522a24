"""A run's cgroup v2 (DESIGN §14): where one can be made, its layout,
its limits, and its removal.

The run's group holds two leaves, the agent's (its gate and check join it
too) and the supervisor's own: the parent of the agent's cgroup is the
run's, not the one the supervisor came from (shared with the driver and the
user), so an agent that writes itself into its parent is still held. Killing
what is in one is the reaper's (engine/reaper.py); this module only makes,
reads and removes the folders.
"""

from __future__ import annotations

import os

from loopctl.fast.data_class import record

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

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


def contain(mark: str) -> Containment:
    """A fresh cgroup for the run marked `mark` where one can be made (never fails): the
    run's group with two leaves, one its agent (and gate, check) joins, one
    the supervisor moves into. An agent that writes itself into the
    parent of its cgroup lands in the run's group, which the next driver
    kills whole when the supervisor is gone; the supervisor's own cgroup,
    which holds the driver and the user's shell, is not that parent."""
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
        remove_tree(group)
        return Containment(mark, None, f"cannot create a cgroup in {base}: {exc.strerror}")
    held = Containment(mark, agent, None, group, None, base)
    if move_self(supervisor):
        held.supervisor = supervisor
    _enable_controllers(group)  # it holds no process itself: the leaves get them
    return held


LEAVES = ("run", "supervisor")


def move_self(folder: str) -> bool:
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


def remove_tree(folder: str) -> None:
    for cgroup in reversed(subtree(folder)):
        try:
            os.rmdir(cgroup)
        except OSError:
            pass


def open_procs(held: Containment) -> int | None:
    if held.cgroup is None:
        return None
    try:
        return os.open(os.path.join(held.cgroup, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return None
