"""Step: the loop's notes (DESIGN §16), handed to the agent and kept after.

Before the agent starts, the kept notes are copied into the run's decision
folder (the one folder of loopctl's a confined agent may write) and named by
`$LOOPCTL_NOTES_FILE`. After it exits, whatever it left there is read back
(bounded; never through a symlink, never from a FIFO or a folder) and kept.
The notes are file content only: never a path, an argument or a placeholder.
"""

from __future__ import annotations

from loopctl.domain.model import LoopDef
from loopctl.domain.state import RunResult
from loopctl.engine.run_context import Handed, RunContext, add_note

ENV = "LOOPCTL_NOTES_FILE"


def hand_out(ctx: RunContext, loop: LoopDef, env: dict[str, str]) -> Handed:
    """The run's copy of the notes, and the variable naming it."""
    from loopctl.storage import notes

    copy = ctx.decision_path.parent / "notes.md"
    notes.write_copy(copy, notes.read_notes(ctx.store.paths, ctx.name))
    env[ENV] = str(copy)
    return Handed(copy, notes.signature(ctx.store.paths, ctx.name))


def take_back(ctx: RunContext, handed: Handed, result: RunResult) -> None:
    """Keep what the agent left, cut at 64 KiB; a note says what went wrong."""
    from loopctl.domain.errors import LoopctlError
    from loopctl.domain.feedback import keep_notes
    from loopctl.storage import notes

    data, size, problem = notes.read_copy(handed.copy)
    if data is None:
        add_note(result, f"{problem or 'notes unreadable'}; the notes were kept as they were")
        return
    text, changes = keep_notes(data, size)
    for change in changes:
        add_note(result, change)
    if notes.signature(ctx.store.paths, ctx.name) != handed.kept_sig:
        add_note(result, "the notes were changed during the run (`loopctl notes --clear`); "
                 "the run's notes were not kept")
        return
    try:
        notes.write_notes(ctx.store.paths, ctx.name, text)
    except (LoopctlError, OSError) as exc:
        add_note(result, f"notes not kept: {getattr(exc, 'message', None) or exc}")
        return
    ctx.log.hold(f"# loopctl: notes kept: {len(text.encode())} bytes")
