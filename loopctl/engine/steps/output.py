"""Step 4: what the agent's output and its decision file say about the run."""

from __future__ import annotations

import os
import stat

from loopctl.domain.agent_cli import is_agent
from loopctl.domain.model import LoopDef
from loopctl.domain.state import RunResult
from loopctl.engine.run_context import RunContext, add_dropped, add_note

# Readers look at the start (session ids) and the end (results) of the output.
HEAD_BYTES = 64 * 1024
TAIL_BYTES = 1024 * 1024


def read_result(ctx: RunContext, loop: LoopDef, result: RunResult) -> None:
    """Let the preset's reader look at the start and end of the output."""
    try:
        # Through the descriptor this supervisor opened, never the path:
        # the agent may have put a symlink where the log was.
        head = os.pread(ctx.log.fd, HEAD_BYTES, 0)
        size = os.fstat(ctx.log.fd).st_size
        start = max(size - TAIL_BYTES, 0)
        tail = os.pread(ctx.log.fd, size - start, start)
    except OSError:
        return
    if is_agent(loop):
        from loopctl.agents.presets import read_output

        reading = read_output(loop, head, tail, result.exit_code)
    else:
        from loopctl.agents.reading import plain

        reading = plain(tail)
    add_dropped(ctx, result, reading.notes)
    result.result_text = reading.result_text
    result.session_id = reading.session_id
    result.cost_usd = reading.cost_usd
    result.tokens = reading.tokens
    result.track_progress = is_agent(loop)
    if result.outcome not in ("ok", "failed"):
        return
    # Only the CLI's own fields may hold the account (DESIGN §18).
    result.loop_only = reading.from_text
    if reading.auth_error and (reading.is_error or result.outcome == "failed"):
        # Not a failure: the account needs a human (DESIGN §18).
        result.outcome = "auth_error"
        where = " (only in the agent's text: this loop alone)" if reading.from_text else ""
        add_note(result, f"needs a login or a key{where}: "
                 + (reading.error or "auth failed")[:200])
    elif reading.rate_limited:
        result.outcome, result.reset_at = "deferred", reading.reset_at
        where = " (only in the agent's text: this loop alone)" if reading.from_text else ""
        add_note(result, f"usage limit{where}: " + (reading.error or "rate limited")[:200])
    elif reading.is_error and result.outcome == "ok":
        result.outcome = "failed"
        add_note(result, "the agent reported an error: " + (reading.error or "")[:200])


def read_decision(ctx: RunContext, result: RunResult) -> None:
    """The agent's decision file is untrusted: bounded, checked field by field."""
    from loopctl.domain.untrusted import MAX_DECISION_BYTES, decision_from_text
    from loopctl.domain.untrusted import read_decision as parse_decision

    try:
        # O_NONBLOCK: a FIFO planted there must not hang this supervisor.
        fd = os.open(ctx.decision_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        # No file (a symlink planted by the agent is not followed): the
        # final message may carry the decision instead.
        result.decision, notes = decision_from_text(result.result_text)
        add_dropped(ctx, result, notes)
        return
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "Is a directory" if stat.S_ISDIR(mode) else "not a regular file"
            add_note(result, f"decision file unreadable: {kind}")
            return
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_DECISION_BYTES + 1)
    except OSError as exc:
        add_note(result, f"decision file unreadable: {exc.strerror}")
        return
    finally:
        os.close(fd)
    result.decision, notes = parse_decision(data)
    add_dropped(ctx, result, notes)
