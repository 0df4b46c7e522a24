"""A fire the team store refused (DESIGN §21), undone in this machine's
state: the slot ran elsewhere (remembered as taken by that run, so it
never fires here), or this machine's definition differs from the team's
(the slot is skipped, on record). Either way the loop is armed again for
its next slot, so a driver does not ask again at every pass."""

from __future__ import annotations

from datetime import tzinfo

from loopctl.domain import slots
from loopctl.domain.model import LoopDef
from loopctl.domain.schedule import next_fire
from loopctl.domain.state import LoopState


def give_way(loop: LoopDef, st: LoopState, now: float, zone: tzinfo,
             taken_by: str | None) -> float | None:
    """Undo the claim of `st["run"]`; the slot's instant when it is to be
    recorded as skipped, its definition differing (slots.skip makes the
    record); None when another run took the slot."""
    run = st["run"]
    assert run is not None  # plan() claimed it
    st["run"] = None
    st["iterations"] = max(st["iterations"] - 1, 0)
    slots.forget(st, str(run["run_id"]))
    instant = run["due_at"] if str(run.get("slot", "")).startswith("schedule:") else None
    skipped = None
    if instant is not None and taken_by is not None:
        slots.remember(st, instant, taken_by)
    elif instant is not None:
        skipped = float(instant)
        slots.remember(st, instant, "skipped: definition_differs")
    if st["next_due"] is None and not loop.on_demand:
        st["next_due"] = next_fire(loop, zone=zone, now=now, last_end=now,
                                   created=st["created"])
    return skipped


def machines_of(loop: LoopDef) -> list[str]:
    """The loop's `machines:` globs (none: any machine)."""
    return list(loop.machines or ())


def runs_on(loop: LoopDef, machine: str) -> bool:
    """Whether `machine` may fire `loop` (its `machines:` globs; none: any)."""
    from fnmatch import fnmatchcase

    globs = machines_of(loop)
    return not globs or any(fnmatchcase(machine, glob) for glob in globs)


def unmatched(globs: list[str], known: set[str]) -> list[str]:
    """The globs that match none of the `known` machines (a warning: a typo
    would leave the loop firing nowhere)."""
    from fnmatch import fnmatchcase

    return [g for g in globs if not any(fnmatchcase(m, g) for m in known)]


def definition_digest(loop: LoopDef) -> str:
    """The digest a claim records: of the loop's loops.yaml form, so two
    machines with the same entry agree whatever its layout or comments."""
    import hashlib
    import json

    from loopctl.domain.loop_raw import to_raw

    text = json.dumps(to_raw(loop), sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]
