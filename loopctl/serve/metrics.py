"""`GET /metrics`: the home in the Prometheus text format (DESIGN §19).

Base units, no run id as a label. The run counters and the duration
histogram count each record once, from the first scrape on, and never go
down when `--keep-runs` prunes old records (a counter that fell would read
as a reset); a restart of the server starts them again from the records
kept, which Prometheus reads as the reset it is.
"""

from __future__ import annotations

import math
import threading
from collections import defaultdict
from typing import Any

from loopctl import __version__
from loopctl.domain.outcomes import FAILURES
from loopctl.domain.timestamps import parse_iso as _parse_iso
from loopctl.storage.store import Store

BUCKETS = (1.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0)
STATUSES = ("running", "queued", "active", "paused", "completed", "failed", "stopped",
            "expired", "held", "invalid")
# A loop whose next fire is this far in the past, with nothing in flight or
# queued, is overdue: no driver is firing it.
OVERDUE_GRACE_S = 120.0
FAILED = FAILURES


class RunTally:
    """Per loop: runs by outcome, duration buckets, counted once each."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: dict[str, set[str]] = defaultdict(set)
        self.outcomes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.buckets: dict[str, list[int]] = {}
        self.sums: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)
        self.last_ok: dict[str, float] = {}
        self.checks: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def update(self, store: Store, names: list[str]) -> None:
        from loopctl.storage.runs import load_record, loop_folder, run_ids

        with self.lock:
            for name in names:
                folder = loop_folder(store.paths, name)
                if folder is None:
                    continue
                seen, kept = self.seen[name], run_ids(store.paths, name)
                # Forget what --keep-runs pruned: a pruned id never comes
                # back, and a long-lived server would hold every id ever run.
                if kept:
                    seen.intersection_update(kept)
                for run_id in kept:
                    if run_id in seen:
                        continue
                    record = load_record(folder / f"{run_id}.json", run_id)
                    if record is not None:
                        seen.add(run_id)
                        self._count(name, record)

    def _count(self, name: str, record: dict[str, Any]) -> None:
        self.outcomes[name][str(record.get("outcome"))] += 1
        check = record.get("check")
        if isinstance(check, dict):
            self.checks[name][check_result(check)] += 1
        duration = record.get("duration_s")
        if isinstance(duration, (int, float)) and math.isfinite(duration) and duration >= 0:
            buckets = self.buckets.setdefault(name, [0] * len(BUCKETS))
            for at, bound in enumerate(BUCKETS):
                if duration <= bound:
                    buckets[at] += 1
            self.sums[name] += float(duration)
            self.counts[name] += 1
        if record.get("outcome") == "ok":
            ended = parse_iso(record.get("ended_at"))
            if ended and ended > self.last_ok.get(name, 0.0):
                self.last_ok[name] = ended


def check_result(check: dict[str, Any]) -> str:
    """A check's `result` label: passed, failed (an exit code), or error
    (timed out or could not start: no exit code)."""
    if check.get("passed") is True:
        return "passed"
    return "failed" if isinstance(check.get("exit_code"), int) else "error"


def parse_iso(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return _parse_iso(text)
    except ValueError:
        return None


def label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def number(value: float) -> str:
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class Metrics:
    def __init__(self, tally: RunTally, webhook_counts: Any) -> None:
        self.tally = tally
        self.webhooks = webhook_counts

    def render(self, store: Store, listed: list[dict[str, Any]], now: float,
               accounts: list[dict[str, Any]]) -> str:
        names = [str(loop["name"]) for loop in listed if loop.get("status") != "invalid"]
        self.tally.update(store, names)
        out: list[str] = []
        with self.tally.lock:
            self._runs(out, names)
        self._loops(out, listed, now)
        family(out, "loopctl_in_flight", "gauge", "Runs in flight now.")
        out.append(f"loopctl_in_flight {sum(1 for x in listed if x.get('current_run'))}")
        family(out, "loopctl_queued", "gauge", "Fires waiting for a slot (max_concurrent).")
        out.append(f"loopctl_queued {sum(1 for x in listed if x.get('queued_since'))}")
        family(out, "loopctl_account_held", "gauge",
               "1 while an account's loops are held (rate limit, login needed).")
        for entry in accounts:
            out.append(f'loopctl_account_held{{preset="{label(entry["preset"])}",'
                       f'kind="{label(entry["kind"])}"}} 1')
        family(out, "loopctl_webhook_deliveries_total", "counter",
               "Webhook deliveries received, by result.")
        from loopctl.serve.hooks import RESULTS

        for result in RESULTS:
            out.append(f'loopctl_webhook_deliveries_total{{result="{result}"}} '
                       f"{self.webhooks.get(result, 0)}")
        family(out, "loopctl_build_info", "gauge", "The loopctl version serving.")
        out.append(f'loopctl_build_info{{version="{label(__version__)}"}} 1')
        return "\n".join(out) + "\n"

    def _runs(self, out: list[str], names: list[str]) -> None:
        tally = self.tally
        family(out, "loopctl_runs_total", "counter", "Finished runs, by loop and outcome.")
        for name in names:
            for outcome, count in sorted(tally.outcomes.get(name, {}).items()):
                out.append(f'loopctl_runs_total{{loop="{label(name)}",'
                           f'outcome="{label(outcome)}"}} {count}')
        family(out, "loopctl_check_runs_total", "counter",
               "Checks (--check) run after the agent, by loop and result.")
        for name in names:
            for result, count in sorted(tally.checks.get(name, {}).items()):
                out.append(f'loopctl_check_runs_total{{loop="{label(name)}",'
                           f'result="{result}"}} {count}')
        family(out, "loopctl_run_duration_seconds", "histogram", "How long runs took.")
        for name in names:
            if name not in tally.buckets:
                continue
            loop = label(name)
            for bound, count in zip(BUCKETS, tally.buckets[name], strict=True):
                out.append(f'loopctl_run_duration_seconds_bucket{{loop="{loop}",'
                           f'le="{number(bound)}"}} {count}')
            out.append(f'loopctl_run_duration_seconds_bucket{{loop="{loop}",le="+Inf"}} '
                       f"{tally.counts[name]}")
            out.append(f'loopctl_run_duration_seconds_sum{{loop="{loop}"}} '
                       f"{number(tally.sums[name])}")
            out.append(f'loopctl_run_duration_seconds_count{{loop="{loop}"}} '
                       f"{tally.counts[name]}")
        family(out, "loopctl_last_success_timestamp_seconds", "gauge",
               "When the loop's last ok run ended (Unix time).")
        for name in names:
            if name in tally.last_ok:
                out.append(f'loopctl_last_success_timestamp_seconds{{loop="{label(name)}"}} '
                           f"{number(tally.last_ok[name])}")

    def _loops(self, out: list[str], listed: list[dict[str, Any]], now: float) -> None:
        valid = [x for x in listed if x.get("status") != "invalid"]
        family(out, "loopctl_cost_usd_total", "counter", "Dollars the loop's runs cost.")
        for x in valid:
            out.append(f'loopctl_cost_usd_total{{loop="{label(x["name"])}"}} '
                       f'{number(x["cost_usd"]["spent"])}')
        family(out, "loopctl_last_run_timestamp_seconds", "gauge",
               "When the loop's last run ended (Unix time).")
        for x in valid:
            ended = parse_iso((x.get("last_run") or {}).get("ended_at"))
            if ended:
                out.append(f'loopctl_last_run_timestamp_seconds{{loop="{label(x["name"])}"}} '
                           f"{number(ended)}")
        family(out, "loopctl_next_run_timestamp_seconds", "gauge",
               "When the loop fires next (Unix time); absent when it will not.")
        for x in valid:
            due = parse_iso(x.get("next_fire"))
            if due:
                out.append(f'loopctl_next_run_timestamp_seconds{{loop="{label(x["name"])}"}} '
                           f"{number(due)}")
        family(out, "loopctl_loop_up", "gauge",
               "1 when the loop is healthy; 0 when overdue, failing or held.")
        for x in listed:
            out.append(f'loopctl_loop_up{{loop="{label(str(x["name"]))}"}} {int(is_up(x, now))}')
        family(out, "loopctl_slots_skipped_total", "counter",
               "Due slots that did not run, by loop and reason.")
        for x in valid:
            for reason, count in sorted(((x.get("skipped_slots") or {}).get("by_reason")
                                         or {}).items()):
                out.append(f'loopctl_slots_skipped_total{{loop="{label(x["name"])}",'
                           f'reason="{label(reason)}"}} {count}')
        family(out, "loopctl_loop_status", "gauge", "1 for the loop's status, 0 for the others.")
        for x in listed:
            shown = status_of(x)
            for status in STATUSES:
                out.append(f'loopctl_loop_status{{loop="{label(str(x["name"]))}",'
                           f'status="{status}"}} {int(status == shown)}')


def status_of(loop: dict[str, Any]) -> str:
    status = str(loop.get("status"))
    if status.startswith("held") or loop.get("reason") in ("rate_limited", "auth_required"):
        return "held"
    return status if status in STATUSES else "invalid"


def is_up(loop: dict[str, Any], now: float) -> bool:
    if status_of(loop) in ("held", "invalid", "failed"):
        return False
    if (loop.get("failures") or {}).get("consecutive"):
        return False
    due = parse_iso(loop.get("next_fire"))
    waiting = loop.get("current_run") or loop.get("queued_since")
    return not (due and not waiting and due < now - OVERDUE_GRACE_S)


def family(out: list[str], name: str, kind: str, help_text: str) -> None:
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} {kind}")
