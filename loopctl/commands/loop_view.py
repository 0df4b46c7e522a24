"""The LOOP object of one loop as a record: what `status NAME`, `start` and
`update` return. Its fields are the documented keys of the LOOP object in
their order (commands/loop_object.py builds them a column at a time, for
`ls --json` of 10,000 loops; tests/commands/test_results.py holds the two
to the same keys), then the keys of the settings shown as their own
(`own`), then what only the text of `status NAME` shows.
"""

from __future__ import annotations

from loopctl.domain.result import JSON_VERSION
from loopctl.fast.data_class import factory, fields, record, replace

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run
if TYPE_CHECKING:
    from typing import Any, ClassVar

# Shown by `status NAME` to a person, never in the JSON.
FOR_PEOPLE = ("fix", "limits", "queue_place")


@record(frozen=True)
class LoopObject:
    name: str
    status: str
    reason: str | None
    held: dict[str, Any] | None
    schedule: dict[str, Any]
    agent: str
    command: list[str] | None
    fallback_agent: str | None
    cwd: str
    runs: dict[str, Any]
    failures: dict[str, Any]
    deferrals: dict[str, Any]
    cost_usd: dict[str, Any]
    created_at: str | None
    deadline: str | None
    deadline_remaining_s: int
    next_fire: str | None
    last_run: dict[str, Any] | None
    current_run: dict[str, Any] | None
    pending_fire: bool
    queued_since: str | None
    skipped_slots: dict[str, Any] | None
    after_run: Any
    recent_outcomes: list[str]
    last_decision: dict[str, Any] | None
    ended_at: str | None
    observed_at: str | None
    note: str | None
    rate_limited_until: str | None
    hook_error: dict[str, Any] | None
    notify: list[str]
    workspace: dict[str, Any] | None
    pr_feedback: dict[str, Any] | None
    notes: bool
    last_handoff: dict[str, Any] | None
    notify_error: dict[str, Any] | None
    gate: dict[str, Any] | None
    triggers_pending: int
    check: dict[str, Any] | None
    last_check: dict[str, Any] | None
    github: dict[str, Any] | None
    own: dict[str, Any] = factory(dict)  # the settings shown as a field of their own
    fix: str | None = None  # what to do about a pause loopctl made
    limits: dict[str, Any] | None = None  # each bound of a run, by its loops.yaml key
    queue_place: int | None = None  # its place among the queued loops

    invalid: ClassVar[bool] = False

    @classmethod
    def from_fields(cls, shown: dict[str, Any]) -> LoopObject:
        """From one loop's cells of loop_object.columns."""
        keys = fields(cls)
        own = {key: value for key, value in shown.items() if key not in keys}
        return cls(**{key: value for key, value in shown.items() if key in keys}, own=own)

    def as_loop(self) -> dict[str, Any]:
        """The LOOP object, as `ls --json` lists it."""
        shape = dict(self.__dict__)
        for key in FOR_PEOPLE:
            del shape[key]
        shape.update(shape.pop("own"))
        return shape

    def to_json(self) -> dict[str, Any]:
        """`status NAME --json`, `start --json`, `update --json`."""
        return {**self.as_loop(), "version": JSON_VERSION}

    def told(self, **people: Any) -> LoopObject:
        """With what `status NAME` tells a person (FOR_PEOPLE)."""
        return replace(self, **people)


@record(frozen=True)
class InvalidLoop:
    """A loops.yaml entry that does not parse, in place of its LOOP object."""

    name: str | None
    error: str | None
    status: str = "invalid"

    invalid: ClassVar[bool] = True
    fix: ClassVar[None] = None

    def as_loop(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "error": self.error}

    def to_json(self) -> dict[str, Any]:
        return {**self.as_loop(), "version": JSON_VERSION}

