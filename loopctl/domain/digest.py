"""`loopctl digest`: what happened since a time, "needs you" first (DESIGN §13).

Pure: it gets the loops as `describe` shows them, their run records and the
attention events, and returns the report (`build`) or its text (`render`).
The command gathers the data and may send the text through Apprise.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

from loopctl.domain.durations import format_usd
from loopctl.domain.result import Notifying
from loopctl.domain.run_record import RunRecord
from loopctl.domain.timestamps import parse_iso
from loopctl.domain.untrusted import line as one_line
from loopctl.fast.data_class import record

if TYPE_CHECKING:
    from typing import TypedDict

    # Parts of the `--json` report, a contract (DESIGN §8, §13): fixed shapes.
    class Total(TypedDict):
        """Every loop's runs and cost in the window."""

        runs: int
        cost_usd: float

    class Checks(TypedDict):
        """What a loop's check said in the window."""

        passed: int
        failed: int
        metric: float | None

WIDTH = 80
OVERDUE_AFTER = 120.0
# Hand-off outcomes a person must act on (DESIGN §12), when a loop has them.
HANDOFF_REASONS = ("handoff_failed", "needs_review")
# Events of a run that a person should hear of even though the loop goes on.
RUN_REASONS = (*HANDOFF_REASONS, "protected_changed")


def _ts(text: object) -> float | None:
    try:
        return parse_iso(text) if isinstance(text, str) else None
    except ValueError:
        return None


def _since(item: dict[str, Any], key: str, since: float) -> bool:
    return _after(item.get(key), since)


def _after(at: Any, since: float) -> bool:
    ts = _ts(at)
    return ts is not None and ts >= since


def needs(loop: dict[str, Any], now: float) -> str | None:
    """Why a person should look at this loop now, or None."""
    status, reason = loop.get("status"), loop.get("reason")
    if status == "invalid":
        return f"invalid: {loop.get('error')}"
    why = (loop.get("last_run") or {}).get("reason")  # the last run's error, if it failed
    if status in ("failed", "expired"):
        return status + (f": {why}" if why and status == "failed" else "")
    if status == "paused" and reason != "user":
        note = loop.get("note") if reason in ("error", "no_progress") else \
            why if reason == "failure_limit" else None
        note = note.removeprefix(f"{reason}: ") if isinstance(note, str) else note
        return f"paused ({reason})" + (f": {note}" if note else "")
    if status == "active" and red_check(loop):
        return f"failing: {why or 'check failed'}"  # a run its check failed (§16)
    due = _ts(loop.get("next_fire"))
    if status == "active" and due is not None and now - due > OVERDUE_AFTER:
        return "overdue: no scheduler has fired it (`loopctl doctor`)"
    return None


def red_check(loop: dict[str, Any]) -> bool:
    """The loop's last run failed by its check: the agent did its part, the
    tests say the work is not right (a failed run, DESIGN §16)."""
    last, check = loop.get("last_run") or {}, loop.get("last_check") or {}
    return last.get("outcome") == "failed" and check.get("passed") is False \
        and check.get("run_id") == last.get("run_id")


@record(frozen=True)
class Digest(Notifying):
    """The report: `needs_you` first, then each loop's runs, decisions,
    hand-offs and events in the window, and the `total`. `notified`: the
    delivery of each target the digest was sent to (`--notify`), else None,
    and then not in the JSON."""

    since: str | None
    until: str | None
    needs_you: list[dict[str, Any]]
    loops: list[dict[str, Any]]
    total: Total | None = None
    # True when the team store's caps left older runs of the window unread
    # (commands/team_view.py); in the JSON only then.
    truncated: bool = False
    notified: list[dict[str, Any]] | None = None

    def to_json(self) -> dict[str, Any]:
        shape = super().to_json()
        if not self.truncated:
            del shape["truncated"]
        return shape

    def cut_short(self) -> Digest:
        """This report, marked as counting only what the store's caps let it read."""
        from loopctl.fast.data_class import replace

        return replace(self, truncated=True)



def build(loops: list[dict[str, Any]], records: dict[str, list[RunRecord]],
          events: list[dict[str, Any]], since: float, now: float) -> Digest:
    from loopctl.domain.timestamps import iso

    recent_events = [e for e in events if _since(e, "at", since)]
    needs_you = [{"loop": loop["name"], "status": loop["status"], "why": why}
                 for loop in loops if (why := needs(loop, now))]
    needs_you += [{"loop": e.get("loop"), "status": e.get("status"),
                   "why": f"{e.get('reason')}: {e.get('summary')}"}
                  for e in recent_events if e.get("reason") in RUN_REASONS]
    out = []
    for loop in loops:
        runs = [r for r in records.get(loop["name"], []) if _after(r.started_at, since)
                or _after(r.observed_at, since)]
        outcomes: dict[str, int] = {}
        for r in runs:
            outcomes[str(r.outcome)] = outcomes.get(str(r.outcome), 0) + 1
        gated = [r for r in runs if r.gate]
        out.append({
            "name": loop["name"], "status": loop["status"], "reason": loop.get("reason"),
            "runs": outcomes,
            # Fires a gate (--if) decided: how many it skipped, how many ran the agent.
            "gate": {"skipped": outcomes.get("skipped", 0),
                     "ran": sum(1 for r in gated if r.gate and r.gate.exit_code == 0)}
            if gated else None,
            "check": _checks(runs),
            "cost_usd": round(sum(map(_cost, runs)), 6),
            "decisions": [_decision(r) for r in runs if r.decision],
            "handoffs": [{"run_id": r.run_id, **_machine(r), "handoff": r.handoff,
                          "branch": r.branch, "pr_url": r.pr_url}
                         for r in runs if r.handoff not in (None, "no_change")],
            "events": [{"at": e.get("at"), "status": e.get("status"),
                        "reason": e.get("reason"), "summary": e.get("summary")}
                       for e in recent_events if e.get("loop") == loop["name"]],
        })
    return Digest(since=iso(since), until=iso(now), needs_you=needs_you, loops=out,
                  total=_total(out))


def _cost(record: RunRecord) -> float:
    """A record's cost, 0 unless a finite, non-negative number."""
    import math

    cost = record.cost_usd
    ok = isinstance(cost, (int, float)) and not isinstance(cost, bool) \
        and math.isfinite(cost) and cost >= 0
    return float(cost) if ok else 0.0  # type: ignore[arg-type]


def _total(loops: list[dict[str, Any]]) -> Total:
    """Every loop's runs and cost in the window, summed."""
    return {"runs": sum(sum(loop["runs"].values()) for loop in loops),
            "cost_usd": round(sum(loop["cost_usd"] for loop in loops), 6)}


def _machine(record: RunRecord) -> dict[str, str]:
    """`machine`, in a home with a team store: which machine ran the run
    (a home of files has no machine, and its report is as it was)."""
    return {"machine": record.machine} if record.machine else {}


def _on(item: dict[str, Any]) -> str:
    return f" (on {item['machine']})" if item.get("machine") else ""


def _decision(record: RunRecord) -> dict[str, object]:
    """A run's decision, and whether it stood: a `complete` the check
    refused (`refused: true`) is not a completed loop. Open: the record's
    decision is passed through as it was written (its keys are the
    record's, DESIGN §6), with the run id first."""
    out: dict[str, object] = {"run_id": record.run_id, **(record.decision or {}),
                              **_machine(record)}
    if out.get("decision") == "complete":
        out["refused"] = "complete refused" in str(record.note or "")
    return out


def _checks(runs: list[RunRecord]) -> Checks | None:
    """What the loop's check (DESIGN §16) said: passes, failures, the last metric."""
    checked = [check for r in runs if (check := r.check) is not None]
    if not checked:
        return None
    metrics = [c.metric for c in checked if c.metric is not None]
    return {"passed": sum(1 for c in checked if c.passed),
            "failed": sum(1 for c in checked if not c.passed),
            "metric": metrics[-1] if metrics else None}


def _wrap(text: str, indent: str) -> list[str]:
    return textwrap.wrap(" ".join(one_line(text).split()), width=WIDTH, initial_indent=indent,
                         subsequent_indent=indent + "  ", max_lines=3,
                         placeholder=" ...") or [indent]


def render(report: Digest) -> str:
    lines = [f"loopctl digest: {report.since} to {report.until}", ""]
    if report.truncated:
        counted = report.total["runs"] if report.total else 0
        lines[1:1] = [f"(counting the newest {counted} runs; older runs of the window "
                      "were not read from the team store)"]
    lines.append("Needs you" if report.needs_you else "Needs you: nothing")
    for item in report.needs_you:
        lines += _wrap(f"{item['loop']}: {item['why']}", "  ")
    for loop in report.loops:
        runs = ", ".join(f"{n} {outcome}" for outcome, n in sorted(loop["runs"].items()))
        cost = f", {format_usd(loop['cost_usd'])}" if loop["cost_usd"] else ""
        reason = f" ({loop['reason']})" if loop.get("reason") else ""
        gate = loop.get("gate")
        gated = f"; gate: {gate['skipped']} skipped, {gate['ran']} ran" if gate else ""
        check = loop.get("check")
        checked = (f"; check: {check['passed']} passed, {check['failed']} failed"
                   + (f", metric {check['metric']:g}" if check["metric"] is not None else "")
                   ) if check else ""
        lines += ["", *_wrap(f"{loop['name']}: {loop['status']}{reason}; runs: "
                             f"{runs or 'none'}{cost}{gated}{checked}", "")]
        for decision in loop["decisions"][-5:]:
            said = "complete, refused by the check" if decision.get("refused") \
                else decision.get("decision")
            lines += _wrap(f"{said}: {decision.get('summary') or '-'}{_on(decision)}", "  ")
        for handoff in loop["handoffs"][-5:]:
            lines += _wrap(f"{handoff['handoff']}: {handoff.get('branch') or '-'}"
                           + (f" {handoff['pr_url']}" if handoff.get("pr_url") else "")
                           + _on(handoff), "  ")
        for event in loop["events"][-5:]:
            lines += _wrap(f"event {event['status']}"
                           + (f" ({event['reason']})" if event.get("reason") else "")
                           + f": {event.get('summary') or ''}", "  ")
    total = report.total
    if total is not None:
        lines += ["", f"Total: {total['runs']} run(s), {format_usd(total['cost_usd'])} "
                      f"across {len(report.loops)} loop(s)"]
    return "\n".join(line[:WIDTH] for line in lines) + "\n"
