"""`doctor`'s checks of the bounds of DESIGN §14: room on the state
directory's file system, and which run bounds this machine enforces."""

from __future__ import annotations

from typing import Any

from loopctl.storage.store import Definitions, Store


def doctor_bounds(store: Store, defs: Definitions, add: Any) -> None:
    """Free space for loopctl's files; which run bounds this machine enforces."""
    from loopctl.engine.containment import cgroup
    from loopctl.storage.space import MIN_FREE, check_space, remedy

    problem, free = check_space(store.paths.state_dir)
    if problem:
        add("error", "disk",
            f"{problem}: run logs and records cannot be written; {remedy(problem)}")
    elif free < MIN_FREE:
        add("warn", "disk", f"only {free // 1024} KiB free for {store.paths.state_dir}: "
            "run logs stop when it is full")
    else:
        add("ok", "disk", f"{free / 1024**3:.1f} GiB free for {store.paths.state_dir}")
    base, why = cgroup.base_cgroup()
    if base:
        add("ok", "bounds", f"each run's processes are held in a cgroup under {base}")
    else:
        add("warn", "bounds", f"no cgroup per run ({why}): a run's leftovers are found by "
            "descent and by an environment marker an agent can remove")
    for name, problem_here in cgroup.limits_here().items():
        option = cgroup.LIMITS[name][1]
        asking = [n for n, loop in defs.loops.items()
                  if (loop.max_memory if name == "memory" else loop.max_procs) is not None]
        if problem_here and asking:  # a limit no loop sets is no one's problem
            add("warn", "bounds", f"{option} cannot be enforced here: {problem_here} "
                f"(set for {', '.join(asking[:5])})")
