"""Attention events: state changes a human should hear about (DESIGN §7).

`attention()` is pure: given a loop's status before and after a transition it
builds the event, or None. The store appends it to `events.jsonl`; a detached
`python -m loopctl.engine.events` process hands it to the hook on stdin (no shell,
no arguments, 10 s timeout) so a slow hook never holds a driver or a lock.
"""

from __future__ import annotations

import json
import sys

from loopctl.domain.durations import format_usd, plural
from loopctl.domain.model import LoopDef
from loopctl.domain.objective import objective_of
from loopctl.domain.run_parts import HANDOFF_KEYS, HandoffSummary
from loopctl.domain.state import LoopState
from loopctl.domain.timestamps import iso
from loopctl.domain.untrusted import line
from loopctl.domain.valves import no_progress_text
from loopctl.fast.data_class import asdict, record, replace

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run
if TYPE_CHECKING:
    from typing import Any, TypeVar

    _Kind = TypeVar("_Kind", bound="Event")

EVENT_VERSION = 1
NOTICED = ("completed", "failed", "expired")
HOOK_OUTPUT = 1 << 20  # what the run's log keeps of a hook's output: its end


def status_key(st: LoopState) -> tuple[str, str | None]:
    return st.status, st.reason


def needs_attention(before: tuple[str, str | None], after: tuple[str, str | None]) -> bool:
    if before == after:
        return False
    status, reason = after
    return status in NOTICED or (status == "paused" and reason != "user")


def _loopctl_evidence(st: LoopState, loop: LoopDef, why: str | None) -> str:
    """What loopctl saw; `why` is the last run's reason (its note or the
    agent's last line), the error a person must fix."""
    status, reason = st.status, st.reason
    if status == "expired":
        return f"the deadline ({iso(st.deadline)}) passed"
    texts = {
        "iteration_limit": f"{st.iterations}/{loop.max_runs} runs used",
        "failure_limit": f"{plural(st.failures, 'failure')} in a row"
                         + (f": {why}" if why else f" (last outcome {st.last_outcome})"),
        "no_progress": no_progress_text(loop),
        "budget_limit": f"{format_usd(st.cost_usd)} spent of "
                        f"{format_usd(loop.budget_usd or 0)}",
        "keepalive_exhausted": "two runs in a row ended without a decision",
        "rate_limited": f"the agent hit a usage limit; resuming at {iso(st.resume_at)}",
        "deferral_limit": f"{st.deferrals} runs in a row deferred by a usage limit "
                          f"(--max-deferrals {loop.max_deferrals})",
        "blocked": "the agent reported block",
        "error": st.note or "loopctl could not save the loop's state",
    }
    return texts.get(reason or "", f"{status} ({reason})" if reason else status)


@record(frozen=True)
class Evidence:
    """Why the event says what it says: `source` (`agent`, `check`,
    `loopctl`) and one line of `text`."""

    source: str
    text: str


@record(frozen=True)
class Event:
    """One attention event (DESIGN §7): a line of events.jsonl and what a
    hook reads on stdin. Its fields, in order, are the JSON's keys after
    `version`; the kinds below add theirs at the end."""

    status: str
    reason: str | None
    loop: str
    summary: str
    evidence: Evidence
    objective: str
    iteration: int
    max_runs: int | None
    elapsed_s: int
    deadline_remaining_s: int
    run_id: str | None
    log: str | None
    cwd: str
    cost_usd: float | None
    ended_at: str | None
    observed_at: str | None
    at: str | None

    def to_json(self) -> dict[str, Any]:
        return {"version": EVENT_VERSION, **self.__dict__, "evidence": asdict(self.evidence)}

    def told(self, reason: str, summary: str, text: str) -> Event:
        """This event as loopctl tells it for `reason` (a run's status is
        unchanged, but a person has something to look at)."""
        return replace(self, reason=reason, summary=summary, evidence=Evidence("loopctl", text))

    def grown(self, kind: type[_Kind], **more: Any) -> _Kind:
        """This event as one of the kinds below, with that kind's fields."""
        return kind(**self.__dict__, **more)


@record(frozen=True)
class HandoffEvent(Event):
    """`handoff_failed` or `needs_review`: the run's branch and PR."""

    branch: str | None
    pr: str | None


@record(frozen=True)
class ProtectedEvent(Event):
    """`protected_changed`: the protected paths the run changed."""

    protected: list[str]


@record(frozen=True)
class HeldAccount:
    """An account event's `account`: the mark and the loops it holds."""

    preset: str
    kind: str
    until: str | None
    loops: list[str]
    fix: str | None


@record(frozen=True)
class AccountEvent(Event):
    """`rate_limited` or `auth_required` of an account (DESIGN §18)."""

    account: HeldAccount

    def to_json(self) -> dict[str, Any]:
        return {**Event.to_json(self), "account": asdict(self.account)}


def attention(loop: LoopDef, st: LoopState, run_id: str | None, log: str | None,
              now: float, why: str | None = None) -> Event:
    """The event for the loop's current (just changed) status; `why` is why
    the run that changed it did not end ok, when one did."""
    decision = st.last_decision or {}
    by_agent = st.status in ("completed", "failed") or st.reason == "blocked"
    if by_agent and decision.get("decision"):
        summary = decision.get("summary") or decision["decision"]
        source, text = decision.get("source") or "agent", decision.get("evidence") or ""
    else:
        source, text = "loopctl", _loopctl_evidence(st, loop, why)
        summary = f"{loop.name} is {st.status}" + (f" ({st.reason})" if st.reason
                                                   else "")
    # One field, one line, in events.jsonl and for every hook: the agent's
    # words (and a state note) are the same text `events` prints.
    return Event(
        status=st.status, reason=st.reason,
        loop=loop.name, summary=line(summary), evidence=Evidence(source, line(text)),
        objective=objective_of(loop),
        iteration=st.iterations, max_runs=loop.max_runs or None,
        elapsed_s=round(now - st.created),
        deadline_remaining_s=max(round(st.deadline - now), 0),
        run_id=run_id, log=log, cwd=loop.cwd,
        cost_usd=st.cost_usd or None,
        ended_at=iso(st.ended_at or now), observed_at=iso(now),
        at=iso(now),
    )


def handoff_summary(record: dict[str, Any]) -> HandoffSummary:
    """What `status` shows of the last hand-off (`record`: the hand-off's
    fields of the run record)."""
    return HandoffSummary(**{key: record.get(key) for key in HANDOFF_KEYS})


def handoff_event(loop: LoopDef, st: LoopState, run_id: str, log: str, now: float,
                  handoff: Any) -> HandoffEvent | None:
    """`handoff_failed` or `needs_review`: the loop's status is unchanged, but
    a person has work to look at (DESIGN §12)."""
    if not (handoff.failure or handoff.review):
        return None
    reason = "handoff_failed" if handoff.failure else "needs_review"
    text = line(handoff.failure or handoff.review)  # git's and gh's words quote anyone's
    told = attention(loop, st, run_id, log, now).told(
        reason, f"{loop.name}: {reason.replace('_', ' ')}: {text}", text)
    return told.grown(HandoffEvent, branch=handoff.fields.get("branch"),
                      pr=handoff.fields.get("pr_url"))


def deliver_detached(hook: str, event: dict[str, Any], folder: str) -> str | None:
    """Hand the event to `hook` from a process of its own (the one detached
    delivery); the error if that process cannot start."""
    from loopctl.integrations.subprocess_runner import detach

    why = detach([sys.executable, "-m", "loopctl.engine.events", hook],
                 json.dumps(event).encode(), folder)
    return f"hook delivery for {hook} could not start: {why}" if why else None


def hook_timeout() -> float:
    from loopctl.settings import knob

    return knob("LOOPCTL_HOOK_TIMEOUT")


def run_hook(hook: str, event: dict[str, Any], timeout: float | None = None) -> tuple[
        str | None, bytes]:
    """Run the hook in a session of its own, the event on its stdin; returns
    (error or None, its output's last HOOK_OUTPUT bytes). At the timeout the
    whole session is killed, children included."""
    import os

    from loopctl.integrations import subprocess_runner as runner

    timeout = hook_timeout() if timeout is None else timeout
    try:
        ran = runner.run([hook], env=os.environ, timeout=timeout, stdin=json.dumps(event).encode(),
                         out_limit=HOOK_OUTPUT, keep_tail=True, stderr="stdout")
    except PermissionError:
        return f"hook {hook} is not executable", b""
    except FileNotFoundError:
        return f"hook {hook} does not exist", b""
    except OSError as exc:
        return f"hook {hook} could not start: {exc.strerror}", b""
    output = (b"# loopctl: the hook's output, cut to its last %d bytes\n" % HOOK_OUTPUT
              if ran.truncated else b"") + ran.out
    if ran.timed_out:
        return f"hook {hook} timed out after {timeout:g}s", output
    if ran.returncode != 0:
        return f"hook {hook} exited {ran.returncode}", output
    return None, output


def _deliver(hook: str) -> int:
    """Entry of the detached delivery process: read the event from stdin, run
    the hook, keep its output in the run's log, record a failure in the
    loop's state."""
    from loopctl.storage.store import Store

    event = json.loads(sys.stdin.buffer.read())
    error, output = run_hook(hook, event)
    if event.get("log"):
        from loopctl.storage.runs import append_to_log

        append_to_log(event["log"], f"# loopctl: hook {hook} for {event['status']}: "
                      f"{error or 'ok'}\n".encode() + output)
    if error:
        Store().record_delivery(event, "hook_error", error)
    return 0 if error is None else 1


def hook_for(loop: LoopDef, global_hook: object) -> str | None:
    if loop.on_attention:
        return loop.on_attention
    return global_hook if isinstance(global_hook, str) and global_hook else None


# Who hears about a loop's events: its hook and its notification targets,
# fixed when a run is claimed (`run["hook"]`, `run["notify"]`).
if TYPE_CHECKING:
    Receivers = dict[str, Any]
    Pending = list[tuple[Event, Receivers]]


def receivers(loop: LoopDef, top: dict[str, Any]) -> Receivers:
    from loopctl.domain.checks import targets_for

    return {"hook": hook_for(loop, top.get("on_attention")),
            "notify": targets_for(loop.notify, top.get("notify"))}


def publish(store: Any, pending: Pending) -> None:
    """Append events; the caller holds the store lock."""
    for event, _ in pending:
        store.append_event(event.to_json())


def dispatch(store: Any, pending: Pending) -> None:
    """Start hook and notification deliveries; call after the store lock is
    released. A delivery that cannot even start is recorded on the loop."""
    folder = str(store.paths.state_dir)
    for told, to in pending:
        event = told.to_json()
        if to.get("hook"):
            error = deliver_detached(to["hook"], event, folder)
            if error:
                store.record_delivery(event, "hook_error", error)
        if to.get("notify"):  # the sender is imported only for a loop that has one
            from loopctl.integrations import notify

            error = notify.deliver_detached(event, list(to["notify"]), folder)
            if error:
                store.record_delivery(event, "notify_error", error)


if __name__ == "__main__":
    sys.exit(_deliver(sys.argv[1]))
