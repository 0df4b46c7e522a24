"""Gates and triggers (DESIGN §17): the pure rules.

A gate (`--if CMD`) decides at each fire whether the agent runs: exit 0
there is work, exit 1 nothing to do (`skipped`), anything else or a
timeout is a `gate_error`. A trigger (`loopctl trigger NAME`) asks for a
fire now, with an optional payload the agent reads as data. Nothing here
touches a file or a process.
"""

from __future__ import annotations

from loopctl.domain.checks import split_command
from loopctl.domain.errors import UsageError

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any, TypedDict

    class GateFields(TypedDict, total=False):
        """A gate's LoopDef fields, those given: keyword arguments that
        `model.parse_loop` merges into the one LoopDef it builds."""

        gate: tuple[str, ...]

MAX_PAYLOAD = 64 * 1024  # bytes of UTF-8 a trigger may carry
GATE_TAIL = 8 * 1024  # bytes of the gate's output kept (log, record, envelope)


def parse_gate(raw: dict[str, Any], where: str) -> GateFields:
    """`if` (split like `command`, run as written: no placeholders, the gate
    gets no prompt) as a LoopDef field; `if_timeout` is read by its row's kind."""
    fields: GateFields = {}
    gate = raw.get("if")
    if gate is not None:
        fields["gate"] = split_command(gate, where, key="if", placeholders=False)
    return fields


def gate_outcome(exit_code: int | None, timed_out: bool) -> str | None:
    """None: the gate passed (run the agent); else the run's outcome."""
    if timed_out or exit_code is None:
        return "gate_error"
    if exit_code == 0:
        return None
    return "skipped" if exit_code == 1 else "gate_error"


def check_payload(data: bytes, what: str = "--payload") -> str:
    """A trigger's payload as text, or a UsageError saying what was wrong.
    It is only ever data (a file, a quoted block of the envelope), never an
    argument or a placeholder; NUL is refused because no text file has one
    and C programs reading the file would stop there."""
    if len(data) > MAX_PAYLOAD:
        raise UsageError(f"bad {what}: {len(data)} bytes; expected at most {MAX_PAYLOAD} "
                         "bytes (64 KiB) of UTF-8 text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"bad {what}: not UTF-8 text (byte {exc.start}); expected at most "
                         "64 KiB of UTF-8 text") from None
    if "\0" in text:
        raise UsageError(f"bad {what}: a NUL byte at {text.index(chr(0))}; expected UTF-8 "
                         "text without NUL")
    return text


def tail_text(data: bytes, limit: int = GATE_TAIL) -> str:
    """The last `limit` bytes as text: a cut or invalid UTF-8 sequence
    becomes U+FFFD, never an error; NUL becomes U+FFFD too (JSON and logs).
    A limit of 0 or less is no bytes (`data[-0:]` would be all of them)."""
    if limit <= 0:
        return ""
    return data[-limit:].decode("utf-8", errors="replace").replace("\0", "\ufffd")
