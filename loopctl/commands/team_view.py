"""One view across machines (DESIGN §21): what `digest`, `ls` and
`/metrics` add in a home with a team store. `digest` counts every
machine's runs in its window, `ls` says which machine runs each loop (or
ran it last), `/metrics` labels the runs in flight with their machine.

Everything here is read from the store and so untrusted: a machine name
is shown only when it is one loopctl could have given (printable, at most
100 characters), rows are bounded in SQL (storage/pg/runs.py) and records
cleaned as team_runs does. A home of files never comes here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loopctl.commands.team_runs import cleaned, machine_of, read_store
from loopctl.domain.run_record import RunRecord
from loopctl.storage.store import Store

# The store stamps a row when it receives it, after the run started: a
# window widened by this much keeps a run whose machine's clock runs ahead.
CLOCK_SLACK_S = 3600.0


def team_records(store: Store, names: list[str], local: dict[str, list[RunRecord]],
                 since: float) -> tuple[dict[str, list[RunRecord]], bool]:
    """Every machine's runs of `names` the store received since `since`
    (less CLOCK_SLACK_S), merged with this machine's own records (which
    win for its runs), oldest first. One connection for every loop. And
    whether the store's caps left older runs of the window unread."""
    from loopctl.commands.team_runs import in_time_order
    from loopctl.storage.pg.runs import runs_since

    by_loop: dict[str, dict[tuple[str, str], RunRecord]] = {name: {} for name in names}
    found, cut = read_store(store, runs_since, names, since - CLOCK_SLACK_S)
    for loop, row in found:
        record = cleaned(loop, row) if loop in by_loop else None
        if record is not None:
            by_loop[loop][(str(record.machine), record.run_id)] = record
    for name, records in local.items():
        for record in records:
            by_loop.setdefault(name, {})[(str(record.machine or ""), record.run_id)] = record
    return {name: sorted(kept.values(), key=in_time_order)
            for name, kept in by_loop.items()}, cut


def _fields(entry: Any) -> Mapping[str, Any] | None:
    """A state entry's fields: a LoopState record's, or an entry as written
    (the listing's short path reads those)."""
    from loopctl.domain.state import LoopState, fields_of

    return fields_of(entry) if isinstance(entry, (LoopState, dict)) else None


def in_flight_machine(entry: Any) -> str | None:
    """The machine of the run in flight in a (shared) state entry."""
    fields = _fields(entry)
    run = fields.get("run") if fields is not None else None
    return machine_of(run.get("machine")) if isinstance(run, dict) else None


def run_machines(store: Store, names: list[str], entries: list[Any]) -> list[str | None]:
    """For `ls`: each loop's machine of its run in flight, else of its last
    run (from the store's row of that run); None when neither is known."""
    from loopctl.storage.pg.runs import machines_of

    now = [in_flight_machine(entry) for entry in entries]
    last_ids = [(_fields(entry) or {}).get("last_run_id") for entry in entries]
    wanted = [(name, str(last_id))
              for name, last_id, machine in zip(names, last_ids, now, strict=True)
              if machine is None and last_id]
    last = read_store(store, machines_of, wanted) if wanted else {}
    return [machine or machine_of(last.get(name))
            for name, machine in zip(names, now, strict=True)]
