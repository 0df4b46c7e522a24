"""What settling a run adds to its record is a typed record (issue 52 item
2), `Settled`, and the run record the supervisor writes with it is byte for
byte what main wrote from the mapping settle returned (LINE: main at
bf586f0, the same steps, the fields added as engine/steps/settle.save adds
them)."""

from __future__ import annotations

import json

from loopctl.domain import lifecycle
from loopctl.domain.model import parse_loop
from loopctl.domain.run_record import RunRecord
from loopctl.domain.state import RunResult, new_loop_state
from loopctl.domain.timestamps import UTC

T0 = 1_800_000_000.0
LINE = ('{"version": 1, "run_id": "20270115T080000Z-0007", "loop": "l", "outcome": "ok", '
        '"cost_usd": 1.5, "note": "requested delay 10s clamped to 60s; no cost read: charged '
        '$1.5, the most this loop\'s runs have cost", "next_delay_s": 60, '
        '"cost_estimated": true, "status_after": "active"}')


def test_a_clamped_delay_and_an_estimate_write_the_record_main_wrote() -> None:
    loop = parse_loop("l", {"prompt": "p", "every": "auto", "agent": "claude",
                            "budget_usd": 5.0})
    st = new_loop_state(loop, T0, zone=UTC)
    lifecycle.claim(loop, st, T0, "schedule", zone=UTC)
    first = lifecycle.settle(loop, st, RunResult("ok", 0, T0, T0 + 1, cost_usd=1.5), T0 + 1,
                             zone=UTC)
    assert first.note == "no decision: keepalive used" and first.to_json() == {}
    lifecycle.claim(loop, st, T0 + 100, "schedule", zone=UTC)
    said = {"decision": "continue", "summary": "s", "evidence": "e", "next_delay_s": 10}
    settled = lifecycle.settle(loop, st, RunResult("ok", 0, T0 + 100, T0 + 101, decision=said),
                               T0 + 101, zone=UTC)
    record = RunRecord.new("20270115T080000Z-0007", "l", outcome="ok", cost_usd=None)
    if settled.note:
        record.add(note=settled.note)
    record.add(**settled.to_json(), status_after=st.status)
    assert json.dumps(record.to_json()) == LINE
