"""A loop's last runs in brief, for the dashboard (DESIGN §19 round 2):
`run-digest/<loop>.json` holds the last KEEP runs that were not skipped by
a gate (run id, outcome, whether its check failed, its reason, when it was
queued, started and ended, its cost) and the spend of each of the last
DAYS days. It is written with every record (under the store lock, beside
the run index), so the overview's strips and the fleet timeline read one
small file per loop, never every record. The file is read back as
untrusted input, bounded and cleaned entry by entry; a missing one is made
again from the records, in memory (a home from before the digest)."""

from __future__ import annotations

import json
import math
import os
import re

from loopctl.domain.errors import LoopctlError
from loopctl.domain.names import is_loop_name
from loopctl.domain.outcomes import OUTCOMES
from loopctl.domain.reason import one_line, run_reason
from loopctl.storage.paths import Paths, read_bounded

TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Any

    from loopctl.domain.run_record import RunRecord

KEEP = 48  # the strip shows 20; the timeline the rest of the last day
DAYS = 8
MAX_BYTES = 256 * 1024
REASON_CHARS = 200
KNOWN = frozenset(OUTCOMES)
CACHED = 20_000
_cache: dict[Any, tuple[tuple[int, ...], dict[str, Any]]] = {}
NUMBERS = ("usd", "q", "s", "e")
RUN_ID = re.compile(r"[0-9]{8}T[0-9]{6}Z-[0-9]{4,9}").fullmatch  # names.is_run_id


def _moment(text: Any) -> float | None:
    from loopctl.domain.timestamps import parse_iso

    if not isinstance(text, str):
        return None
    try:
        at = parse_iso(text)
    except (ValueError, OverflowError):
        return None
    return at if math.isfinite(at) else None


def _number(value: Any, high: float = 1e12) -> float | None:
    """A finite number from 0 to `high` (not a bool), else None. NaN fails
    both comparisons, an infinity the second."""
    return float(value) if type(value) in (int, float) and 0 <= value <= high else None


def check_failed(record: RunRecord) -> bool:
    return record.check is not None and not record.check.passed


def reason_of(record: RunRecord) -> str | None:
    """Why the run was not ok, or why its check failed (DESIGN §16)."""
    said = run_reason(record)
    if said or not check_failed(record):
        return said
    code = record.check.exit_code if record.check else None
    return "check failed" + (f" (exit {code})" if code is not None else "")


def brief(record: RunRecord) -> dict[str, Any]:
    """One run as the digest keeps it."""
    started, ended = _moment(record.started_at), _moment(record.ended_at)
    queued = _number(record.queued_s, 1e9)
    reason = reason_of(record)
    return {"id": record.run_id, "o": record.outcome, "c": check_failed(record),
            "r": one_line(reason, REASON_CHARS) if reason else None,
            "q": started - queued if started is not None and queued else None,
            "s": started, "e": ended, "usd": _number(record.cost_usd)}


def _clean_run(run: Any) -> dict[str, Any] | None:
    """One entry as written, or None: a check per field, none of them a
    call where a comparison does (a view reads 20,000 of them)."""
    if type(run) is not dict or run.get("o") not in KNOWN:
        return None
    run_id, reason, c = run.get("id"), run.get("r"), run.get("c")
    if type(run_id) is not str or not RUN_ID(run_id):
        return None
    if reason is not None:
        reason = one_line(reason, REASON_CHARS) if type(reason) is str else None
    out = {"id": run_id, "o": run["o"], "c": c is True, "r": reason}
    for key in NUMBERS:
        value = run.get(key)
        out[key] = value if type(value) is float and 0 <= value <= 1e12 else \
            _number(value)
    return out


def _clean(data: Any, last: int = KEEP) -> dict[str, Any]:
    if not isinstance(data, dict):
        return {"runs": [], "days": {}}
    runs, days = data.get("runs"), data.get("days")
    runs = runs if isinstance(runs, list) else []
    days = days if isinstance(days, dict) else {}
    kept = [r for r in map(_clean_run, runs[-min(last, KEEP):]) if r is not None]
    spent = {k: usd for k, v in days.items()
             if isinstance(k, str) and len(k) == 10 and (usd := _number(v)) is not None}
    return {"runs": kept, "days": dict(sorted(spent.items())[-DAYS:])}


def _rebuilt(paths: Paths, loop: str) -> dict[str, Any]:
    from loopctl.storage.runs import read_record, run_ids

    digest: dict[str, Any] = {"runs": [], "days": {}}
    for run_id in run_ids(paths, loop)[-KEEP:]:  # the newest: a view, not an audit
        record = read_record(paths, loop, run_id)
        if record is not None:
            _add(digest, record)
    return digest


def read(paths: Paths, loop: str, last: int = KEEP) -> dict[str, Any]:
    """The loop's digest: `runs` (its last `last`, oldest first) and `days`
    (UTC date: USD)."""
    return _parsed(paths, loop, paths.run_digest(loop), last)


def read_many(paths: Paths, loops: list[str], last: int = KEEP) -> list[dict[str, Any]]:
    """`read` of each loop, the folder joined once (1,000 loops a view)."""
    folder = os.fspath(paths.run_digest("x").parent)
    return [_parsed(paths, loop, os.path.join(folder, loop + ".json"), last)
            if is_loop_name(loop) else {"runs": [], "days": {}} for loop in loops]


def _parsed(paths: Paths, loop: str, path: Any, last: int) -> dict[str, Any]:
    """Parsed and cleaned once per version of the file: a server keeps what
    it read (CACHED loops) and reads again only a file replaced since (its
    inode, size and mtime): one stat per loop a view. Shared: never changed."""
    try:
        seen = os.stat(path, follow_symlinks=False)
    except OSError:
        return _read(paths, loop, path, last)
    version = (seen.st_ino, seen.st_size, seen.st_mtime_ns)
    kept = _cache.get((path, last))
    if kept is not None and kept[0] == version:
        return kept[1]
    digest = _read(paths, loop, path, last)
    if len(_cache) >= CACHED:
        _cache.clear()
    _cache[(path, last)] = (version, digest)
    return digest


def _read(paths: Paths, loop: str, path: Any, last: int) -> dict[str, Any]:
    data = read_bounded(path, MAX_BYTES)
    if data is None and not os.path.lexists(path):
        return _rebuilt(paths, loop)
    try:
        return _clean(json.loads(data) if data else None, last)
    except (ValueError, RecursionError):
        return {"runs": [], "days": {}}


def _add(digest: dict[str, Any], record: RunRecord) -> None:
    if record.outcome == "skipped":
        return
    shown = brief(record)
    known = any(r["id"] == shown["id"] for r in digest["runs"])  # its record rewritten
    digest["runs"] = [r for r in digest["runs"] if r["id"] != shown["id"]]
    digest["runs"] = (digest["runs"] + [shown])[-KEEP:]
    day = record.ended_at or record.started_at
    if shown["usd"] and not known and isinstance(day, str) and len(day) >= 10:
        days = digest["days"]
        days[day[:10]] = days.get(day[:10], 0.0) + shown["usd"]
        digest["days"] = dict(sorted(days.items())[-DAYS:])


def add(paths: Paths, loop: str, run_id: str) -> None:
    """Take the run whose record loopctl just wrote into the digest (under
    the store lock). Never fails the run: the digest is a view."""
    from loopctl.storage.atomic import atomic_write, strict_json
    from loopctl.storage.paths import ensure_dir
    from loopctl.storage.runs import read_record

    try:
        record = read_record(paths, loop, run_id)
        if record is None:
            return
        digest = read(paths, loop)
        _add(digest, record)
        path = paths.run_digest(loop)
        ensure_dir(path.parent)
        atomic_write(path, (strict_json(digest) + "\n").encode(), durable=False)
    except (OSError, ValueError, TypeError, LoopctlError):
        pass
