"""The run record, `runs/<loop>/<run-id>.json` (DESIGN §2), as one typed record.

Every key the schema names (domain/records.py) is a field. Two shapes, one
class:

- written: the supervisor and the driver that finds a run lost build one with
  `RunRecord.new(...)` and `add(...)`; `to_json()` gives the keys they set, in
  the order they set them, so that the file's bytes are what loopctl has
  always written (tests and users diff these files).
- read: `RunRecord.from_json(data, run_id)` cleans what a file held (the
  folder is agent-writable: untrusted): every schema field, of the right type
  or None, what was not named in `damaged`. A key the schema does not name
  (written by a newer loopctl) is kept in `extra`, after the schema's keys,
  so that reading then writing loses nothing.
"""

from __future__ import annotations

from loopctl.fast.data_class import factory, fields, record

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run
if TYPE_CHECKING:
    from typing import Any

    from loopctl.domain.result import JsonPart
    from loopctl.domain.run_parts import CheckRecord, GateRecord, PlanRecord

MAX_EXTRA_KEYS = 100  # of a newer loopctl's keys kept from one file
MAX_EXTRA_KEY = 64  # characters of such a key


@record
class RunRecord:
    """One run's record; `keys` are its JSON's keys in order (the fields it
    has, and `extra`'s), `extra` the keys of a newer loopctl."""

    version: int = 1
    run_id: str = ""
    loop: str | None = None
    iteration: int | None = None
    trigger: str | None = None
    slot: str | None = None
    due_at: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    observed_at: str | None = None
    duration_s: float | None = None
    exit_code: int | None = None
    outcome: str | None = None
    missed: int | None = None
    decision: dict[str, str | None] | None = None
    session_id: str | None = None
    cost_usd: float | None = None
    result: str | None = None
    log: str | None = None
    argv: list[str] | None = None
    note: str | None = None
    log_truncated: bool | None = None
    cost_estimated: bool | None = None
    sandbox: str | None = None
    gate: GateRecord | None = None
    check: CheckRecord | None = None
    pr_feedback: PlanRecord | None = None
    protected: list[str] | None = None
    protected_count: int | None = None
    agent: str | None = None
    fallback_from: str | None = None
    triggers: int | None = None
    machine: str | None = None
    queued_s: float | None = None
    handoff: str | None = None
    branch: str | None = None
    base: str | None = None
    base_ref: str | None = None
    head: str | None = None
    pr_url: str | None = None
    merged: bool | None = None
    commits: int | None = None
    files_changed: int | None = None
    insertions: int | None = None
    deletions: int | None = None
    left_out: list[JsonPart] | None = None
    handoff_error: str | None = None
    needs_review: str | None = None
    handoff_note: str | None = None
    next_delay_s: float | None = None
    status_after: str | None = None
    damaged: list[str] | None = None
    keys: list[str] = factory(list)
    extra: JsonPart = factory(dict)

    @classmethod
    def new(cls, run_id: str, loop: str, **values: Any) -> RunRecord:
        """A record of the schema's fields; one outside it is a bug, refused."""
        made = cls(run_id=run_id, loop=loop, keys=["version", "run_id", "loop"])
        return made.add(**values)

    def add(self, **values: Any) -> RunRecord:
        """Set fields (a key already written keeps its place); this record."""
        unknown = set(values) - FIELD_NAMES
        if unknown:
            raise ValueError(f"run record fields outside the schema: {', '.join(sorted(unknown))}")
        for key, value in values.items():
            setattr(self, key, value)
            if key not in self.keys:
                self.keys.append(key)
        return self

    def to_json(self) -> dict[str, Any]:
        """The record's JSON: its keys in order (a part, its own JSON)."""
        extra, values = self.extra, self.__dict__
        out = {key: extra[key] if key in extra else values[key] for key in self.keys}
        for key in PARTS:  # never in `extra`: schema fields
            if out.get(key) is not None:
                out[key] = out[key].to_json()
        return out

    @classmethod
    def from_json(cls, data: Any, run_id: str) -> RunRecord:
        """What a record file held, cleaned as `history` shows it."""
        from loopctl.domain.records import clean_record

        made = clean_record(data, run_id)
        made.extra = dict(_extra(data))
        made.keys.extend(made.extra)
        return made


def _extra(data: Any) -> list[tuple[str, Any]]:
    """The keys of a newer loopctl with their values as they were (bounded:
    the file is); a key that is no name loopctl would write is dropped."""
    if not isinstance(data, dict):
        return []
    kept = [(k, v) for k, v in data.items() if isinstance(k, str) and k not in FIELD_NAMES
            and k not in NOT_FIELDS and 0 < len(k) <= MAX_EXTRA_KEY and k.isprintable()
            and _finite(v)]
    return kept[:MAX_EXTRA_KEYS]


def _finite(value: Any, depth: int = 0) -> bool:
    """Whether `value` can be written back as strict JSON: Python's reader
    takes `Infinity` and `NaN`, which `history --json` then could not print
    (a planted file must not break the view of every run)."""
    if isinstance(value, float):
        return value == value and value not in (float("inf"), float("-inf"))
    if depth > 32:
        return False
    if isinstance(value, dict):
        return all(_finite(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v, depth + 1) for v in value)
    return True


# The fields that are records of their own (domain/run_parts): written as
# their own JSON.
PARTS = ("gate", "check", "pr_feedback")
NOT_FIELDS = frozenset({"keys", "extra"})
FIELD_NAMES = frozenset(fields(RunRecord)) - NOT_FIELDS
