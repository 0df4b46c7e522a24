"""A loop's run counters (DESIGN §19): what `/metrics` serves as counters.

Kept in the loop's state entry (`tally`) and bumped in the same state write
that settles a run, so they never go back when `--keep-runs` prunes records,
survive a restart of `serve`, and the server holds nothing per run. `rm`
drops the entry, and with it the loop's series. An entry written before the
tally existed has none: the first run settled after the upgrade starts it
from the records kept (`seeded`), so the count goes on from what was shown.
"""

from __future__ import annotations

from loopctl.domain import untrusted as check
from loopctl.domain.timestamps import parse_iso

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any
    from typing import TypedDict as _Shape

    from loopctl.domain.run_parts import CheckRecord
    from loopctl.domain.run_record import RunRecord
else:
    _Shape = object

# The duration histogram's upper bounds, in seconds (+Inf is `count`).
BUCKETS = (1.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0)
CHECK_RESULTS = ("passed", "failed", "error")
MAX_COUNT = 2**53  # still exact as a JSON number read back as a float


class Tally(_Shape):
    """state.json's `tally` of one loop."""

    runs: dict[str, int]  # finished runs by the outcome their record holds
    checks: dict[str, int]  # checks run, by CHECK_RESULTS
    buckets: list[int]  # runs that took at most BUCKETS[i] seconds
    count: int  # runs with a duration (the histogram's +Inf bucket)
    sum: float  # their seconds
    last_ok: float | None  # when the newest ok run ended


def empty() -> Tally:
    return {"runs": {}, "checks": {}, "buckets": [0] * len(BUCKETS), "count": 0,
            "sum": 0.0, "last_ok": None}


def check_result(run_check: CheckRecord) -> str:
    """A check's `result`: passed, failed (an exit code), or error (timed
    out or could not start: no exit code)."""
    if run_check.passed:
        return "passed"
    return "failed" if run_check.exit_code is not None else "error"


def add(tally: Tally | None, record: RunRecord) -> Tally:
    """`tally` (None: an empty one) with one more run, as its record says.
    A copy: the caller writes it back in the state write that settles."""
    out = empty() if tally is None else copy(tally)
    outcome = str(record.outcome)
    if outcome in check.OUTCOMES:
        out["runs"][outcome] = out["runs"].get(outcome, 0) + 1
    run_check = record.check
    if run_check is not None:
        result = check_result(run_check)
        out["checks"][result] = out["checks"].get(result, 0) + 1
    duration = check.number(record.duration_s, 0.0, 1e12)
    if duration is not None:
        for at, bound in enumerate(BUCKETS):
            if duration <= bound:
                out["buckets"][at] += 1
        out["count"] += 1
        out["sum"] += duration
    if outcome == "ok":
        ended = moment(record.ended_at)
        if ended is not None and ended > (out["last_ok"] or 0.0):
            out["last_ok"] = ended
    return out


def seeded(records: Iterable[RunRecord]) -> Tally:
    """A tally of the records kept: where an older state.json's loop starts."""
    out = empty()
    for record in records:
        out = add(out, record)
    return out


def copy(tally: Tally) -> Tally:
    return {"runs": dict(tally["runs"]), "checks": dict(tally["checks"]),
            "buckets": list(tally["buckets"]), "count": tally["count"],
            "sum": tally["sum"], "last_ok": tally["last_ok"]}


def moment(text: Any) -> float | None:
    """An ISO timestamp read from a file or a record, or None when it is not one."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return parse_iso(text)
    except ValueError:
        return None


def check_tally(value: Any) -> Any:
    """state.json's `tally` as `add` writes it, else INVALID."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return check.INVALID
    runs, checks, buckets = value.get("runs"), value.get("checks"), value.get("buckets")
    if not isinstance(runs, dict) or not isinstance(checks, dict) \
            or not _counts(runs, check.OUTCOMES) or not _counts(checks, CHECK_RESULTS) \
            or not isinstance(buckets, list) or len(buckets) != len(BUCKETS) \
            or any(check.count(n, MAX_COUNT) is None for n in buckets) \
            or check.count(value.get("count"), MAX_COUNT) is None \
            or check.number(value.get("sum"), 0.0, 1e18) is None \
            or value.get("last_ok") is not None and check.moment(value["last_ok"]) is None:
        return check.INVALID
    return {"runs": dict(runs), "checks": dict(checks), "buckets": list(buckets),
            "count": value["count"], "sum": float(value["sum"]),
            "last_ok": None if value.get("last_ok") is None else float(value["last_ok"])}


def _counts(value: dict[Any, Any], keys: tuple[str, ...]) -> bool:
    return all(
        k in keys and check.count(n, MAX_COUNT) is not None for k, n in value.items())
