"""The team's runs in the views (DESIGN §21): in a home with a store,
`history`, `logs` and `status` show every machine's runs, read from the
store and merged with this machine's own files (which win for this
machine's runs: a record not yet sent is still shown).

A row from the store is untrusted (any machine with the password writes
there): its size is bounded in SQL (storage/pg/runs.py), its record is
cleaned field by field as a file an agent could write (domain/records
`clean_record`), its machine and run id must be names loopctl gives, and
every text shown goes through the one sanitizer (the views print it)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loopctl.domain.names import is_run_id
from loopctl.domain.run_record import RunRecord
from loopctl.domain.untrusted import text
from loopctl.storage.pg.gate import store_set
from loopctl.storage.store import Store

if TYPE_CHECKING:
    from loopctl.domain.skipped import SkippedSlot


@dataclass
class TeamLog:
    """A run's log as the store has it: where the whole log is, its tail."""

    run_id: str
    machine: str
    path: str | None
    tail: bytes
    cut: bool  # more of the log came before the tail
    record: RunRecord


def has_store(store: Store) -> bool:
    """Cheap: whether the home has a store (no psycopg, no connection)."""
    return store_set(store.read_defs().top)


def read_store(store: Store, query: Any, *args: Any) -> Any:
    """`query(conn, *args)` on the home's connection to its store (the one
    its shared state keeps: storage/pg/state.SharedState.reader); a link
    lost mid-way is the store being unreachable (exit 3), as at the gate."""
    from loopctl.storage.pg.connect import StoreUnreachable, driver, first_line

    shared = store.shared()
    assert shared is not None  # has_store said so
    try:
        return query(shared.reader(), *args)
    except driver().Error as exc:
        shared.close()  # broken: the next use connects again
        raise StoreUnreachable(f"store is unreachable: {first_line(exc)}") from None


def machine_of(value: Any) -> str | None:
    name = text(value, 100)
    return name if name and name.isprintable() else None


def cleaned(name: str, row: Any) -> RunRecord | None:
    """A store row as a record `history` can show; None for a row whose
    run id or machine is not one loopctl gives."""
    machine = machine_of(row.machine)
    if not is_run_id(row.run_id) or machine is None:
        return None
    try:
        data = json.loads(row.record) if row.record is not None else None
    except (ValueError, RecursionError):
        data = None
    record = RunRecord.from_json(data, row.run_id)
    record.loop, record.machine = name, machine  # the row's key, not its text
    return record


def in_time_order(record: RunRecord) -> tuple[str, int, str]:
    """Runs of several machines in time order (run ids count per machine)."""
    from loopctl.storage.runs import run_order

    at = record.started_at or record.due_at or record.observed_at or ""
    return (str(at), *run_order(record.run_id))


def merged(store: Store, name: str, local: list[RunRecord],
           rows: int | None = None) -> list[RunRecord]:
    """Every machine's runs of `name` (the store's newest `rows`), oldest
    first; this machine's own files win over the store's copy of a run."""
    return merged_read(store, name, local, rows)[0]


def merged_read(store: Store, name: str, local: list[RunRecord],
                rows: int | None = None) -> tuple[list[RunRecord], bool]:
    """`merged`, and whether the store's caps left older runs unread."""
    from loopctl.storage.pg.runs import runs_of

    by_key: dict[tuple[str, str], RunRecord] = {}
    found, cut = read_store(store, runs_of, name, rows)
    for row in found:
        record = cleaned(name, row)
        if record is not None:
            by_key[(str(record.machine), record.run_id)] = record
    for record in local:
        by_key[(str(record.machine or ""), record.run_id)] = record
    return sorted(by_key.values(), key=in_time_order), cut


def skips(store: Store, name: str) -> list[SkippedSlot]:
    """Every machine's skipped slots of `name` (each row checked as
    storage/runs.read_skips checks a line), each with its row's machine."""
    from loopctl.domain.skipped import SkippedSlot
    from loopctl.fast.data_class import replace
    from loopctl.storage.pg.runs import skips_of

    out = []
    for machine, entry in read_store(store, skips_of, name):
        try:
            found = SkippedSlot.from_json(json.loads(entry) if entry is not None else None)
        except (ValueError, RecursionError):
            continue
        if found is not None:
            out.append(replace(found, machine=machine_of(machine) or "?"))
    return out


def log_of(store: Store, name: str, run_id: str) -> TeamLog | None:
    """The newest copy the store holds of run `run_id` of `name` from
    another machine than this one; None when there is none."""
    from loopctl.storage.pg.dsn import machine as this_machine
    from loopctl.storage.pg.runs import run_of

    here = this_machine()
    for row in read_store(store, run_of, name, run_id):
        record = cleaned(name, row)
        if record is None or record.machine is None or record.machine == here:
            continue
        machine_of = record.machine
        path = text(row.log_path, 4096)
        return TeamLog(run_id, machine_of, path, row.tail or b"", row.cut, record)
    return None


def latest(store: Store, name: str) -> RunRecord | None:
    """The team's newest run of `name` (any machine), or None."""
    runs = merged(store, name, [], rows=5)  # the newest recorded, in time order
    return runs[-1] if runs else None


def with_machine(store: Store, name: str, described: Any) -> Any:
    """`status NAME`'s `last_run` in a home with a store: the team's
    newest run (this machine's or another's), with the machine that ran it."""
    from loopctl.commands.loop_view import LoopObject
    from loopctl.domain.reason import run_reason
    from loopctl.storage.pg.dsn import machine

    if not isinstance(described, LoopObject) or not has_store(store):
        return described
    here = machine()
    last = {**described.last_run, "machine": here} if described.last_run else None
    team = latest(store, name)
    if team is not None and last is not None and team.run_id == last.get("run_id"):
        last["machine"] = team.machine  # the team's state: its last run may be anyone's
    elif team is not None and team.machine != here:
        ended = team.ended_at or team.observed_at
        if last is None or str(ended or "") > str(last.get("ended_at") or ""):
            last = {"run_id": team.run_id, "outcome": team.outcome, "ended_at": ended,
                    "reason": run_reason(team), "machine": team.machine}
    return described.told(last_run=last)
