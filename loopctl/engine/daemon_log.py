"""What the daemon tells its log besides `fired`: each run's end (but a
gate-skipped fire's, which is only its `fired` line) and each transition of
a loop (the attention events), one line each.

It reads only what drivers already write: the records of the runs this
daemon fired (one small file each, once it exists) and the lines appended
to `events.jsonl` since it last looked (from a remembered offset). The agent
can write neither in a way that reaches the terminal raw: records are
cleaned (storage.runs) and every printed text goes through `one_line`."""

from __future__ import annotations

import json
import os
from typing import Any

from loopctl.domain.reason import one_line, run_reason
from loopctl.domain.run_record import RunRecord
from loopctl.storage.store import Store

MAX_EVENT_BYTES = 1 << 20  # read per pass at most: a flood waits for the next


class DaemonLog:
    def __init__(self, store: Store) -> None:
        self.store = store
        # Run ids are unique per loop only: two loops' first runs in one
        # second share one.
        self.pending: set[tuple[str, str]] = set()  # (loop, run id)
        self.offset = self._size()  # events from before this daemon are old news

    def _size(self) -> int:
        try:
            return os.stat(self.store.paths.events_file).st_size
        except OSError:
            return 0

    def fired(self, loop: str, run_id: str) -> None:
        self.pending.add((loop, run_id))

    def lines(self) -> list[str]:
        return self._ended() + self._events()

    def _ended(self) -> list[str]:
        from loopctl.storage.runs import read_record

        out = []
        for loop, run_id in sorted(self.pending):
            record = read_record(self.store.paths, loop, run_id)
            if record is None:
                continue
            self.pending.discard((loop, run_id))
            # A gate that found nothing to do is the quiet case: its `fired`
            # line is enough (history keeps the gate's word).
            if record.outcome != "skipped":
                out.append(run_end_line(loop, record))
        return out

    def _events(self) -> list[str]:
        size = self._size()
        if size < self.offset:  # replaced or truncated: start over from its end
            self.offset = size
        if size == self.offset:
            return []
        try:
            fd = os.open(self.store.paths.events_file, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return []
        with os.fdopen(fd, "rb") as handle:
            handle.seek(self.offset)
            data = handle.read(MAX_EVENT_BYTES)
        complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits
        self.offset += len(complete)
        out = []
        for raw in complete.splitlines():
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            if isinstance(event, dict):
                out.append(transition_line(event))
        return out


def run_end_line(loop: str, record: RunRecord) -> str:
    """`run RUN of LOOP ended: failed (exit 127, 0.1s): agent not found ...`"""
    facts = []
    if record.exit_code is not None:
        facts.append(f"exit {record.exit_code}")
    if record.duration_s is not None:
        facts.append(f"{float(record.duration_s):.1f}s")
    text = f"run {record.run_id} of {loop} ended: {record.outcome}"
    text += f" ({', '.join(facts)})" if facts else ""
    reason = run_reason(record)
    if record.handoff:
        text += f"; hand-off {one_line(str(record.handoff), 40)}"
    return text + (f": {reason}" if reason else "")


def transition_line(event: dict[str, Any]) -> str:
    """`LOOP is now paused (failure_limit): 3 failures in a row ...`"""
    reason = f" ({one_line(str(event['reason']), 40)})" if event.get("reason") else ""
    evidence = event.get("evidence") if isinstance(event.get("evidence"), dict) else None
    proof = str((evidence or {}).get("text") or event.get("summary") or "")
    head = f"{one_line(str(event.get('loop')), 80)} is now {one_line(str(event.get('status')), 40)}"
    return head + reason + (f": {one_line(proof)}" if proof else "")
