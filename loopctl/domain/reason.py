"""Why a run ended as it did, in one line a person can act on.

The reason is loopctl's own note when it has one (`agent not found on PATH:
claude`, the reader's `the agent reported an error: Not logged in`), else the
last line the agent printed. The agent's text is untrusted: control
characters are dropped and the line is bounded before anyone prints it."""

from __future__ import annotations

from loopctl.domain.untrusted import line

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:

    from loopctl.domain.run_record import RunRecord

MAX_REASON = 300
REFUSED = "complete refused: "  # domain/verify.refusal


def one_line(text: str, limit: int = MAX_REASON) -> str:
    """`text` as one printable line of at most `limit` characters."""
    shown = " ".join(line(text).split())
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def run_reason(record: RunRecord | None) -> str | None:
    """Why the run in `record` did not end ok; None when it did (or when no
    reason was left)."""
    if not record or record.outcome in (None, "ok"):
        return None
    note = record.note
    if isinstance(note, str) and note.strip():
        # A refused `complete` failed by its check: the check is why (§16).
        return one_line(note.removeprefix(REFUSED) if record.outcome == "failed"
                        else note)
    result = record.result
    if isinstance(result, str):
        # Split before sanitizing: `line` makes the whole text one line.
        lines = [ln for ln in result.splitlines() if line(ln).strip()]
        if lines:
            return one_line(lines[-1])
    return None


def cwd_missing(cwd: str, exists: bool) -> str:
    """Why no run of a loop can start in `cwd` (`exists`: something, not
    a folder, is there)."""
    return f"working directory {one_line(cwd)} " + ("is not a folder" if exists
                                                     else "does not exist")
