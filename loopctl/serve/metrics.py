"""`GET /metrics`: the home in the Prometheus text format (DESIGN §19).

Base units, no run id as a label. The run counters and the duration
histogram are each loop's `tally`, kept in state.json and bumped in the
state write that settles each run (domain/tally): they never go down when
`--keep-runs` prunes records, a restart of the server changes nothing, and
the server holds nothing per run. A loop whose entry predates the tally
shows what its records kept say until its next run starts the tally there.
In a home with a team store the state, and so the tally, is the team's:
any machine serves the same counters, and `team` adds the machines.
"""

from __future__ import annotations

from typing import Any

from loopctl import __version__
from loopctl.domain import tally as tallies
from loopctl.domain.accounts import AccountMark
from loopctl.domain.outcomes import FAILURES
from loopctl.domain.state import LoopState
from loopctl.domain.tally import BUCKETS, Tally
from loopctl.domain.tally import moment as parse_iso
from loopctl.storage.store import Store

STATUSES = ("running", "queued", "active", "paused", "completed", "failed", "stopped",
            "expired", "held", "invalid")
# A loop whose next fire is this far in the past, with nothing in flight or
# queued, is overdue: no driver is firing it.
OVERDUE_GRACE_S = 120.0
FAILED = FAILURES


def tallies_of(store: Store, entries: dict[str, LoopState], names: list[str]) -> dict[str, Tally]:
    """Each loop's tally from its state entry; an entry written before the
    tally existed is counted from its records kept (read, not remembered)."""
    from loopctl.storage.runs import list_records

    out: dict[str, Tally] = {}
    for name in names:
        st = entries.get(name)
        if st is None:
            continue
        kept = st.tally
        if kept is None and not st.seq:
            kept = tallies.empty()  # never claimed a run: no record to read
        out[name] = kept if kept is not None else tallies.seeded(
            list_records(store.paths, name))
    return out


def label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def number(value: float) -> str:
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class Metrics:
    def __init__(self, webhook_counts: Any) -> None:
        self.webhooks = webhook_counts

    def render(self, store: Store, listed: list[dict[str, Any]], now: float,
               accounts: list[AccountMark], entries: dict[str, LoopState]) -> str:
        """`entries`: state.json's loops, as read for this scrape."""
        names = [str(loop["name"]) for loop in listed if loop.get("status") != "invalid"]
        out: list[str] = []
        self._runs(out, names, tallies_of(store, entries, names))
        self._loops(out, listed, now)
        family(out, "loopctl_in_flight", "gauge", "Runs in flight now.")
        out.append(f"loopctl_in_flight {sum(1 for x in listed if x.get('current_run'))}")
        family(out, "loopctl_queued", "gauge", "Fires waiting for a slot (max_concurrent).")
        out.append(f"loopctl_queued {sum(1 for x in listed if x.get('queued_since'))}")
        family(out, "loopctl_account_held", "gauge",
               "1 while an account's loops are held (rate limit, login needed).")
        for entry in accounts:
            out.append(f'loopctl_account_held{{preset="{label(entry.preset)}",'
                       f'kind="{label(entry.kind)}"}} 1')
        family(out, "loopctl_webhook_deliveries_total", "counter",
               "Webhook deliveries received, by result.")
        from loopctl.serve.hooks import RESULTS

        for result in RESULTS:
            out.append(f'loopctl_webhook_deliveries_total{{result="{result}"}} '
                       f"{self.webhooks.get(result, 0)}")
        family(out, "loopctl_build_info", "gauge", "The loopctl version serving.")
        out.append(f'loopctl_build_info{{version="{label(__version__)}"}} 1')
        from loopctl.storage.pg.gate import home_has_store

        if home_has_store(store):
            team(out, entries, names)
        return "\n".join(out) + "\n"

    def _runs(self, out: list[str], names: list[str], tally: dict[str, Tally]) -> None:
        family(out, "loopctl_runs_total", "counter", "Finished runs, by loop and outcome.")
        for name in names:
            for outcome, count in sorted(tally[name]["runs"].items() if name in tally else ()):
                out.append(f'loopctl_runs_total{{loop="{label(name)}",'
                           f'outcome="{label(outcome)}"}} {count}')
        family(out, "loopctl_check_runs_total", "counter",
               "Checks (--check) run after the agent, by loop and result.")
        for name in names:
            for result, count in sorted(tally[name]["checks"].items() if name in tally else ()):
                out.append(f'loopctl_check_runs_total{{loop="{label(name)}",'
                           f'result="{result}"}} {count}')
        family(out, "loopctl_run_duration_seconds", "histogram", "How long runs took.")
        for name in names:
            if name not in tally or not tally[name]["count"]:
                continue
            loop, one = label(name), tally[name]
            for bound, count in zip(BUCKETS, one["buckets"], strict=True):
                out.append(f'loopctl_run_duration_seconds_bucket{{loop="{loop}",'
                           f'le="{number(bound)}"}} {count}')
            out.append(f'loopctl_run_duration_seconds_bucket{{loop="{loop}",le="+Inf"}} '
                       f"{one['count']}")
            out.append(f'loopctl_run_duration_seconds_sum{{loop="{loop}"}} '
                       f"{number(one['sum'])}")
            out.append(f'loopctl_run_duration_seconds_count{{loop="{loop}"}} {one["count"]}')
        family(out, "loopctl_last_success_timestamp_seconds", "gauge",
               "When the loop's last ok run ended (Unix time).")
        for name in names:
            last_ok = tally[name]["last_ok"] if name in tally else None
            if last_ok:
                out.append(f'loopctl_last_success_timestamp_seconds{{loop="{label(name)}"}} '
                           f"{number(last_ok)}")

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


def team(out: list[str], entries: dict[str, Any], names: list[str]) -> None:
    """A team store's home (DESIGN §21): the counters above are the team's
    (the tally is in the shared state), so every machine serves the same
    series; these tell the machines apart. The machine of a run comes from
    the store: shown only when it is a name loopctl gives, escaped."""
    from loopctl.commands.team_view import in_flight_machine
    from loopctl.storage.pg.dsn import machine

    family(out, "loopctl_run_in_flight", "gauge",
           "1 for each loop's run in flight, labelled with the machine running it.")
    for name in names:
        running = in_flight_machine(entries.get(name))
        if running is not None:
            out.append(f'loopctl_run_in_flight{{loop="{label(name)}",'
                       f'machine="{label(running)}"}} 1')
    family(out, "loopctl_info", "gauge", "The machine serving these metrics.")
    out.append(f'loopctl_info{{machine="{label(machine())}"}} 1')


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
