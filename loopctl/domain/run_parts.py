"""The parts of a run record that are objects of their own (DESIGN §2), and
what the loop's state keeps of them, as typed records: the gate's `gate`
(§17), the check's `check` (§16), the state's `last_check` and
`last_handoff` (§12). A fix run's `pr_feedback` is domain/feedback's
`PlanRecord`.

Each part is made two ways: by the run that writes it, from the values
loopctl computed, and by `from_json` from what a file, a state entry or a
store row held (untrusted: checked field by field; None when it is not that
part's shape). `to_json()` is the mapping loopctl has always written, key
for key and in the same order, so that runs/*.json, state.json and the
`--json` outputs keep their bytes (tests/domain/test_run_parts.py).
"""

from __future__ import annotations

from loopctl.domain import untrusted
from loopctl.domain.names import is_run_id
from loopctl.fast.data_class import record

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

TAIL_READ = 16 * 1024  # characters of an output tail read back from a record
MAX_WHY = 200  # characters of why a check has no exit code
MAX_CODE = 1e9  # an exit code read back: a whole number within +-this


def _code(value: object) -> int | None:
    code = untrusted.number(value, -MAX_CODE, MAX_CODE)
    return int(code) if code is not None else None


@record(frozen=True)
class GateRecord:
    """The run record's `gate`: the gate's exit code (None: it had none, it
    timed out or could not start) and the tail of its output."""

    exit_code: int | None
    output_tail: str

    def to_json(self) -> dict[str, Any]:
        return {"exit_code": self.exit_code, "output_tail": self.output_tail}

    @classmethod
    def from_json(cls, value: object) -> GateRecord | None:
        """A record's `gate` as `history` may show it (None: damaged)."""
        if not isinstance(value, dict):
            return None
        return cls(_code(value.get("exit_code")),
                   untrusted.text(value.get("output_tail"), TAIL_READ) or "")


@record(frozen=True)
class CheckRecord:
    """The run record's `check` (and a finished run's `RunResult.check`):
    exit 0 passed; without an exit code, `why` there was none (`check
    cannot start pytst: not found`), else None and not written."""

    exit_code: int | None
    passed: bool
    duration_s: float | None
    output_tail: str
    metric: float | None
    why: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"exit_code": self.exit_code, "passed": self.passed,
                               "duration_s": self.duration_s,
                               "output_tail": self.output_tail, "metric": self.metric}
        if self.why is not None:
            out["why"] = self.why
        return out

    @classmethod
    def from_json(cls, value: object) -> CheckRecord | None:
        """A record's `check` as `history` may show it (None: damaged); a
        metric that is not a finite number is dropped."""
        if not isinstance(value, dict) or not isinstance(value.get("passed"), bool):
            return None
        code = _code(value.get("exit_code"))
        why = untrusted.text(value.get("why"), MAX_WHY)
        return cls(exit_code=code, passed=value["passed"],
                   duration_s=untrusted.number(value.get("duration_s"), 0, 1e9),
                   output_tail=untrusted.text(value.get("output_tail"), TAIL_READ) or "",
                   metric=untrusted.number(value.get("metric"), -1e308, 1e308),
                   why=why if why and code is None else None)


@record(frozen=True)
class KeptCheck:
    """What the loop's state keeps of its last check, `last_check` in
    state.json (the output's tail stays in the run record: state.json is
    read by every command)."""

    run_id: str
    exit_code: int | None
    passed: bool
    metric: float | None
    why: str | None = None  # a check that could not start says why in `status`

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"run_id": self.run_id, "exit_code": self.exit_code,
                               "passed": self.passed, "metric": self.metric}
        if self.why is not None:
            out["why"] = self.why
        return out

    @classmethod
    def from_json(cls, value: object) -> KeptCheck | None:
        """A state entry's `last_check` (None: not that shape). An exit code
        as loopctl records one (a whole number, 128+N for a signal, None
        when there was none), and `passed` only with exit 0: a damaged entry
        must not have the envelope say "passed (exit 0)" of a 3."""
        if not isinstance(value, dict) or not is_run_id(value.get("run_id")) \
                or not isinstance(value.get("passed"), bool):
            return None
        code, metric = value.get("exit_code"), value.get("metric")
        if code is not None and untrusted.count(code, 1000) is None \
                or value["passed"] != (code == 0) \
                or metric is not None and untrusted.number(metric, -1e308, 1e308) is None:
            return None
        why = value.get("why")
        kept = untrusted.line(why)[:MAX_WHY] if isinstance(why, str) and why and code is None \
            else None  # hand-edited text: one plain line
        return cls(value["run_id"], code, value["passed"], metric, kept)


HANDOFF_KEYS = ("handoff", "branch", "commits", "pr_url", "merged", "handoff_error",
                "needs_review")


@record(frozen=True)
class HandoffSummary:
    """What `status` shows of the last hand-off (the state's `last_handoff`):
    the hand-off record's fields that were set, None ones not written."""

    handoff: str | None = None
    branch: str | None = None
    commits: int | None = None
    pr_url: str | None = None
    merged: bool | None = None
    handoff_error: str | None = None
    needs_review: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {key: value for key in HANDOFF_KEYS if (value := getattr(self, key)) is not None}


@record(frozen=True)
class ProtectedPaths:
    """The run record's `protected` (the first paths, sorted) and, when the
    agent changed more, `protected_count` (all of them)."""

    protected: list[str]
    count: int | None = None


# -- a fix run's `pr_feedback` (DESIGN §16; the rules are domain/feedback's) ----------

ACTIONS = ("continue", "review", "drop", "none")
MAX_FIX_ATTEMPTS = 100
MAX_CHECKS_SHOWN = 20
# A run writes its keys in this order; `history` has always shown a record
# read back in the second (both are outputs users diff).
WRITTEN = ("pr", "action", "why", "failed_checks", "attempt", "of", "branch", "note")
READ = ("pr", "why", "branch", "note", "action", "attempt", "of", "failed_checks")


@record(frozen=True)
class PlanRecord:
    """The run record's `pr_feedback`: what the look at the loop's PR
    decided (`action`), why, the failed checks, and for `continue` the fix
    attempt, of how many, on which branch. A field that is None is not
    written; `keys` are the JSON's keys in order."""

    action: str
    pr: str | None = None
    why: str | None = None
    failed_checks: list[str] | None = None
    attempt: int | None = None
    of: int | None = None
    branch: str | None = None
    note: str | None = None
    keys: tuple[str, ...] = ()

    @classmethod
    def written(cls, **values: Any) -> PlanRecord:
        """The part as a run writes it, its keys in WRITTEN's order."""
        return cls(**values, keys=_present(WRITTEN, values))

    def to_json(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in self.keys}

    @classmethod
    def from_json(cls, value: object) -> PlanRecord | None:
        """A record's `pr_feedback` as `history` may show it (None: damaged)."""
        if not isinstance(value, dict) or value.get("action") not in ACTIONS:
            return None
        def text(key: str) -> str | None:
            return untrusted.text(value.get(key), 4000)

        def fixes(key: str) -> int | None:
            return untrusted.count(value.get(key), MAX_FIX_ATTEMPTS + 1)

        checks = value.get("failed_checks")
        values = {"action": value["action"], "pr": text("pr"), "why": text("why"),
                  "failed_checks": [c for c in checks[:MAX_CHECKS_SHOWN]
                                    if untrusted.text(c, 400)]
                  if isinstance(checks, list) else None,
                  "attempt": fixes("attempt"), "of": fixes("of"), "branch": text("branch"),
                  "note": text("note")}
        return cls(**values, keys=_present(READ, values))


def _present(order: tuple[str, ...], values: dict[str, Any]) -> tuple[str, ...]:
    """The keys of `order` whose value is not None: those written."""
    return tuple(key for key in order if values.get(key) is not None)
