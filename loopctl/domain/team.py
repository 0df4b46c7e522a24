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

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any


def give_way(loop: LoopDef, st: LoopState, now: float, zone: tzinfo,
             taken_by: str | None) -> float | None:
    """Undo the claim of `st.run`; the slot's instant when it is to be
    recorded as skipped, its definition differing (slots.skip makes the
    record); None when another run took the slot."""
    run = st.run
    assert run is not None  # plan() claimed it
    st.run = None
    st.iterations = max(st.iterations - 1, 0)
    st.forget_slot(str(run["run_id"]))
    instant = run["due_at"] if str(run.get("slot", "")).startswith("schedule:") else None
    skipped = None
    if instant is not None and taken_by is not None:
        slots.remember(st, instant, taken_by)
    elif instant is not None:
        skipped = float(instant)
        slots.remember(st, instant, "skipped: definition_differs")
    if st.next_due is None and not loop.on_demand:
        st.next_due = next_fire(loop, zone=zone, now=now, last_end=now,
                              created=st.created)
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


def drop_local(raw: dict[str, Any], loop: LoopDef) -> None:
    """Make `raw` (the loop's loops.yaml form, `to_raw`) portable: drop what
    is this machine's own, its working directory, when it was started here,
    its local hooks and notification URLs, its env values (names stay) and
    where its prompt file lives. An export travels in this form
    (integrations/export), so a home and its targets agree on the loop."""
    for key in ("cwd", "created_at", "on_attention", "notify", "env", "prompt_file"):
        raw.pop(key, None)
    if loop.env:
        raw["env"] = dict.fromkeys(sorted(loop.env))
    if loop.prompt_file:
        raw["prompt_file"] = True  # a file, wherever it is (its text is each checkout's)


def definition_digest(loop: LoopDef) -> str:
    """The digest a claim records: of the loop's portable form, so two
    machines with the same entry agree whatever its layout or comments,
    and a home agrees with the targets it exported the loop to."""
    import hashlib
    import json

    from loopctl.domain.loop_raw import to_raw

    raw = to_raw(loop)
    drop_local(raw, loop)
    text = json.dumps(raw, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]
