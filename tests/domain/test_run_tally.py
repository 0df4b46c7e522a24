"""A loop's run counters (domain/tally, DESIGN §19): each finished run adds
one, as its record says; what `add` writes reads back clean, and a damaged
tally is reset like any other bad field."""

from __future__ import annotations

from typing import Any

import pytest

from loopctl.domain import tally
from loopctl.domain.run_record import RunRecord
from loopctl.domain.state import repair
from loopctl.domain.verify import check_record


def record(outcome: str, duration: float | None = 2.0, **extra: Any) -> RunRecord:
    return RunRecord.new("r-1", "x", outcome=outcome, duration_s=duration,
                         ended_at="2026-12-01T10:00:00Z", **extra)


def test_each_run_adds_one_by_outcome_check_and_duration() -> None:
    counted = tally.seeded([
        record("ok", 0.5, check=check_record(0, 0.1, "", None)),
        record("failed", 45.0, check=check_record(1, 0.1, "", None)),
        record("timeout", 4000.0, check=check_record(None, 0.1, "", None)),
        record("lost", None),
    ])
    assert counted["runs"] == {"ok": 1, "failed": 1, "timeout": 1, "lost": 1}
    assert counted["checks"] == {"passed": 1, "failed": 1, "error": 1}
    assert counted["count"] == 3 and counted["sum"] == 4045.5  # the lost run has none
    assert counted["buckets"][0] == 1 and counted["buckets"][3] == 2  # <= 1 s, <= 60 s
    assert counted["buckets"][-1] == 3
    assert counted["last_ok"] == 1796119200.0  # 2026-12-01T10:00:00Z


def test_add_leaves_the_tally_it_was_given_alone() -> None:
    first = tally.add(None, record("ok"))
    second = tally.add(first, record("ok"))
    assert first["runs"] == {"ok": 1} and second["runs"] == {"ok": 2}
    assert first["buckets"] is not second["buckets"]


def test_what_add_writes_reads_back_clean() -> None:
    written = tally.seeded([record("ok"), record("failed", 7.25)])
    assert tally.check_tally(written) == written


@pytest.mark.parametrize("damage", [
    {"runs": {"ok": -1}}, {"runs": {"made-up": 1}}, {"checks": {"passed": True}},
    {"buckets": [0, 1]}, {"count": "3"}, {"sum": float("nan")}, {"last_ok": -5},
    {"runs": []},
])
def test_a_damaged_tally_is_reset_and_the_loop_paused(damage: dict[str, Any]) -> None:
    from loopctl.domain.model import LoopDef
    from loopctl.domain.state import new_loop_state
    from loopctl.domain.timestamps import UTC

    st: dict[str, Any] = dict(vars(new_loop_state(LoopDef(name="t"), 0.0, zone=UTC)))
    st["tally"] = {**tally.seeded([record("ok")]), **damage}
    clean, bad = repair("t", st)
    assert bad == ["tally"] and clean.tally is None
    assert (clean.status, clean.reason) == ("paused", "error")


def test_an_entry_from_before_the_tally_is_no_damage() -> None:
    from loopctl.domain.model import LoopDef
    from loopctl.domain.state import new_loop_state
    from loopctl.domain.timestamps import UTC

    st: dict[str, Any] = dict(vars(new_loop_state(LoopDef(name="t"), 0.0, zone=UTC)))
    del st["tally"]
    clean, bad = repair("t", st)
    assert bad == [] and clean.tally is None and clean.status == "active"
