"""Verified outcomes (DESIGN §16): the pure rules of `--check CMD`.

An agent's decision is a claim. With a check, loopctl runs the user's
command after the agent (engine/steps/check.py) and this module decides
what its result means: a `complete` stands only when the check passes,
`--until-check` completes on a passing check whatever the agent said, a
metric read from the output feeds the no-progress valve. Nothing here
touches a file, a process or the clock.
"""

from __future__ import annotations

import math
import re

from loopctl.domain.checks import split_command
from loopctl.domain.durations import format_duration
from loopctl.domain.errors import UsageError
from loopctl.domain.run_parts import MAX_WHY, CheckRecord, KeptCheck
from loopctl.domain.untrusted import line, shorten
from loopctl.fast.data_class import record
from loopctl.fast.lazy_re import lazy

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypedDict

    from loopctl.domain.run_record import RunRecord

    class CheckFields(TypedDict, total=False):
        """A check's LoopDef fields, those given: keyword arguments that
        `model.parse_loop` merges into the one LoopDef it builds."""

        check: tuple[str, ...]
        check_timeout: int
        until_check: bool
        check_metric: str

    class CheckShown(TypedDict):
        """The LOOP JSON's `check` (DESIGN §8: a fixed shape of the wire)."""

        argv: list[str]
        timeout_s: int
        until_check: bool
        metric: str | None

KEYS = ("check", "check_timeout", "until_check", "check_metric")
DEFAULT_CHECK_TIMEOUT = 600
# What is kept of the check's output: the metric is searched in the last
# METRIC_WINDOW characters (a regex never sees a flood whole), the log gets
# at most LOG_TAIL bytes after its `# loopctl: check` line, and the record
# and the next run's envelope the last TAIL bytes.
KEEP = 64 * 1024
METRIC_WINDOW = KEEP
LOG_TAIL = KEEP
TAIL = 4 * 1024
MAX_REGEX = 500
MAX_METRIC_TEXT = 64  # characters of a number; more is not a number but a flood
METRIC_SECONDS = 1.0  # the metric regex is killed after this (catastrophic backtracking)
_NUMBER = lazy(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def parse_verify(raw: dict[str, Any], where: str,
                 named: Callable[[str], str] = repr) -> CheckFields:
    """`check` and `check_metric` as LoopDef fields (`check_timeout` and
    `until_check` are read by their rows' kinds, and their need of the
    check is their rows' rule: setting_rules.NEEDS). The check is run as
    written (no placeholders, like a gate)."""
    fields: CheckFields = {}
    if raw.get("check") is not None:
        fields["check"] = split_command(raw["check"], where, key="check", placeholders=False)
    if raw.get("check_metric") is not None:
        fields["check_metric"] = check_regex(raw["check_metric"], named("check_metric"))
    return fields


def check_regex(value: object, what: str) -> str:
    """A regex with a group around the number; compiled now, so a bad one
    is refused at `start`, never at the first run."""
    if not isinstance(value, str) or not value or len(value) > MAX_REGEX:
        raise UsageError(f"bad {what} {shorten(value)}: expected a regular expression of "
                         f"1-{MAX_REGEX} characters")
    try:
        compiled = re.compile(value)
    except (re.error, RecursionError, OverflowError) as exc:
        raise UsageError(f"bad {what} {shorten(value)}: {line(str(exc))}; expected a Python "
                         "regular expression like 'coverage: ([0-9.]+)%'") from None
    if compiled.groups < 1:
        raise UsageError(f"bad {what} {shorten(value)}: no group; put the number in "
                         "parentheses, like 'coverage: ([0-9.]+)%'")
    return value


def describe_check(argv: tuple[str, ...] | None, timeout: int, until: bool,
                   metric: str | None) -> CheckShown | None:
    """The LOOP JSON's `check`, what is configured, from the four fields
    (`ls --json` reads them a column at a time)."""
    if not argv:
        return None
    return {"argv": list(argv), "timeout_s": timeout, "until_check": until, "metric": metric}


# -- the metric ---------------------------------------------------------------


def metric_value(found: str | None) -> tuple[float | None, str | None]:
    """The first group of the first match as a metric, or why it is dropped."""
    if found is None:
        return None, None
    text = found.strip()
    if len(text) > MAX_METRIC_TEXT:
        return None, (f"check metric dropped: {len(text)} characters; expected a number of "
                      f"at most {MAX_METRIC_TEXT}")
    if not _NUMBER.fullmatch(text):
        return None, f"check metric dropped: {shorten(line(text), 70)} is not a number"
    value = float(text)
    if not math.isfinite(value):
        return None, f"check metric dropped: {text} is not a finite number"
    return value, None


def first_group(pattern: str, text: str) -> str | None:
    """Unbounded in time: the engine runs it where it can be killed."""
    match = re.search(pattern, text[-METRIC_WINDOW:])
    return match.group(1) if match else None


# -- what the check's result means ---------------------------------------------


def check_record(exit_code: int | None, duration_s: float, output_tail: str,
                 metric: float | None, why: str | None = None) -> CheckRecord:
    """The run record's `check` (exit 0 = passed); without an exit code,
    `why` there was none (`check cannot start pytst: not found`)."""
    return CheckRecord(exit_code=exit_code, passed=exit_code == 0,
                       duration_s=round(duration_s, 3), output_tail=output_tail[-TAIL:],
                       metric=metric,
                       why=line(why)[:MAX_WHY] if exit_code is None and why else None)


def failure_text(check: CheckRecord | None, timeout: float) -> str:
    if check is None:
        return "the check did not run"
    if check.exit_code is None:
        return check.why or \
            f"check failed (timed out after {format_duration(int(timeout))} or did not start)"
    return f"check failed (exit {check.exit_code})"


def refusal(loop: Any, check: CheckRecord | None, kind: str | None) -> str | None:
    """Why the agent's `complete` does not stand, or None."""
    if not loop.check or kind != "complete" or check is not None and check.passed:
        return None
    return "complete refused: " + failure_text(check, loop.check_timeout)


@record(frozen=True)
class CheckDecision:
    """The decision a passing check makes under `--until-check`: the loop
    completes; the evidence is the check's (`source: check`)."""

    summary: str
    evidence: str

    def to_json(self) -> dict[str, str]:
        """As a decision is kept (the run record's and the state's)."""
        return {"decision": "complete", "summary": self.summary, "evidence": self.evidence,
                "source": "check"}


def by_check(loop: Any, check: CheckRecord | None,
             decision: dict[str, Any] | None) -> CheckDecision | None:
    """`--until-check`: a passing check completes the loop, whatever the agent
    decided (None: the agent's decision stands). An agent that said
    `complete` keeps its summary."""
    if not loop.until_check or check is None or not check.passed:
        return None
    said = (decision or {}).get("summary") if (decision or {}).get("decision") == "complete" \
        else None
    metric = check.metric
    evidence = f"`{line(' '.join(loop.check))[:200]}` exited 0" \
        + (f" (metric {metric:g})" if metric is not None else "")
    return CheckDecision(summary=said or "the check passed", evidence=evidence)


def progress_key(check: CheckRecord) -> str:
    """What the no-progress valve compares with a metric: the metric alone
    (a run without one counts as `-`, so a check that never prints it
    still runs out of patience)."""
    metric = check.metric
    return "metric:" + ("-" if metric is None else repr(float(metric)))


def last_check(run_id: str, check: CheckRecord) -> KeptCheck:
    """What the loop's state keeps of its last check (the tail stays in the
    run record: state.json is read by every command)."""
    return KeptCheck(run_id=run_id, exit_code=check.exit_code, passed=check.passed,
                     metric=check.metric, why=check.why or None)


@record(frozen=True)
class LastCheck:
    """The loop's last check as the next run's envelope tells the agent:
    what state.json keeps of it (`last_check`) and its output's tail, read
    back from its run record (untrusted: whatever the code under test
    printed; the envelope quotes it as data)."""

    exit_code: int | None
    passed: bool
    metric: float | None
    why: str | None = None
    output_tail: str = ""


# -- what a driver's exit code and its lines say of a finished run ------------

# Parts of a run's note saying its check could not vouch for it although
# the loop has one (engine/steps/check.py, engine/steps/protect.py).
NOT_RUN = ("check not run", "protect failed")


def check_words(check: CheckRecord | None, note: str | None) -> str | None:
    """`check passed`, `check failed (exit 1)`, `check failed (check cannot
    start pytst: not found)`, `check not run`; None: the loop has no check."""
    if check is not None:
        if check.passed:
            return "check passed"
        code = check.exit_code
        return f"check failed (exit {code})" if code is not None else \
            f"check failed ({line(check.why or 'no exit code')[:MAX_WHY]})"
    if any(part in str(note or "") for part in NOT_RUN):
        return "check not run"
    return None


def verdict(loop: Any, outcome: str, check: CheckRecord | None, note: str | None,
            decided: str | None = None) -> tuple[str, str | None]:
    """The run's outcome after its check, and the words to put first in its
    note (its reason): a run whose agent succeeded but whose check failed,
    timed out, could not start or was not run is `failed` (`check failed
    (exit 1)`); under `--until-check` it is `ok`, "not yet"."""
    if outcome != "ok" or not loop.check:
        return outcome, None
    said = check_words(check, note)
    if said in (None, "check passed"):
        return outcome, None
    words = failure_text(check, loop.check_timeout) if check is not None else None
    if loop.until_check:
        return "ok", "not yet: " + (words or "check not run")
    if words is not None and (words in (note or "") or decided == "complete"):
        words = None  # the note says it already (`check cannot start pytst: ...`),
        # or will (`complete refused: check failed (exit 1)`, when the run settles)
    return "failed", words


def failed_verification(record: RunRecord) -> bool:
    """An agent that succeeded but whose check failed, could not start or
    was not run: `run` and `tick --wait` exit 1 for it (a CI job is never
    green on red tests)."""
    said = check_words(record.check, record.note)
    return said is not None and said != "check passed"
