"""The views of what the runs did: `logs` (one run's output), `history`
(the runs, with their hand-offs), `events` (the attention events).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from loopctl.cli.options import JsonOpt, NameArg, emit, fail, store
from loopctl.cli.render import fit_line, table
from loopctl.cli.team_follow import follow as team_follow
from loopctl.cli.team_follow import foreign_run
from loopctl.cli.team_logs import team_log
from loopctl.cli.views import handoff_parts
from loopctl.commands import views as reading
from loopctl.domain.durations import format_duration
from loopctl.domain.errors import LoopctlError
from loopctl.domain.reason import one_line
from loopctl.domain.run_parts import CheckRecord
from loopctl.domain.run_record import RunRecord
from loopctl.domain.state import LoopState
from loopctl.storage.store import Store


def live_run(state: dict[str, Any], name: str) -> dict[str, Any]:
    """The run in flight of loop `name` in the state ({}: none, or no such loop)."""
    st: LoopState | None = state["loops"].get(name)
    return (st.run if st is not None else None) or {}


def logs(name: NameArg,
         run_id: Annotated[Optional[str], typer.Option("--run", help="Run id (default: latest).")] = None,
         follow: Annotated[bool, typer.Option("--follow", "-f", help="Follow a live run until it ends, then exit with its exit code (as `run` gives it); a run that already ended is printed and its code given at once.")] = False) -> None:
    """Print a run's log (the latest by default)."""
    from loopctl.domain.checks import check_name
    from loopctl.domain.untrusted import check_run_id
    from loopctl.storage.runs import is_known, latest_run_id

    s = store()
    if run_id is not None:
        check_run_id(run_id)
    check_name(name)  # run files exist only under names `start` accepts
    # Only runs loopctl recorded, or the one in flight: never a planted file.
    live = live_run(s.read_state(), name)
    current = live.get("run_id")
    if current is not None and (elsewhere := foreign_run(live, run_id)) is not None:
        raise typer.Exit(team_follow(s, name, elsewhere, follow))  # from the team store
    if run_id is not None and run_id != current and not is_known(s.paths, name, run_id):
        if not team_log(s, name, run_id, follow):  # another machine's, from the team store
            fail(f"no log for run {run_id!r} of {name!r}", 4)
        return
    if run_id is None and current is None and team_log(s, name, None, follow):
        return
    run_id = run_id or latest_run_id(s.paths, name, current)
    if run_id is None:
        if not s.read_defs().has(name):
            raise LoopctlError(f"no such loop: {name!r} (see `loopctl ls`)", 4)
        if not follow:
            fail(f"loop {name!r} has no runs yet (`loopctl logs -f {name}` waits for the "
                 "first)", 1)
        run_id = _first_run(s, name)
    path = s.paths.run_log(name, run_id)
    if not path.exists():
        fail(f"no log for run {run_id!r} of {name!r}", 4)
    _print_log(s, name, run_id, path, follow)


def _first_run(s: Store, name: str) -> str:
    """`logs -f` before the first run: wait for its log to appear (Ctrl-C
    stops), and say so once, on stderr, where a pipe does not see it."""
    from loopctl.storage.runs import latest_run_id

    print(f"waiting for the first run of {name}...", file=sys.stderr, flush=True)
    while True:
        # The run in flight is in the state, not yet in the index of runs.
        current = live_run(s.read_state(), name).get("run_id")
        run_id = latest_run_id(s.paths, name, current)
        if run_id is not None and s.paths.run_log(name, run_id).exists():
            return run_id
        if not s.read_defs().has(name):
            raise LoopctlError(f"loop {name!r} was removed before its first run", 4)
        time.sleep(0.25)


def _print_log(s: Store, name: str, run_id: str, path: Path, follow: bool) -> None:
    import stat

    from loopctl.storage.runs import read_bounded

    out = sys.stdout.buffer
    try:  # non-blocking: a FIFO planted as the log must not hang `logs`
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        fail(f"cannot read the log of run {run_id}: {exc.strerror}", 1)
    seen = os.fstat(fd)
    if not stat.S_ISREG(seen.st_mode) or seen.st_nlink != 1:  # a link to another file
        os.close(fd)
        fail(f"cannot read the log of run {run_id}: not a regular file", 1)
    out.write((_header(s, name, run_id) + "\n").encode())
    with os.fdopen(fd, "rb") as handle:
        checked = time.monotonic()
        while True:
            chunk = handle.read(65536)
            if chunk:
                out.write(chunk)
                continue
            out.flush()
            if not follow or read_bounded(s.paths.run_record(name, run_id)) is not None:
                if follow:  # the footer may land after the record check
                    out.write(handle.read())
                    out.flush()
                    raise typer.Exit(_run_exit(s, name, run_id))
                return
            if time.monotonic() - checked >= 1.0:
                checked = time.monotonic()
                if not _run_in_flight(s, name, run_id):
                    out.write(handle.read())
                    out.flush()
                    fail(f"run {run_id} of {name} is no longer running and left no record "
                         "(its supervisor died; the next driver records it as lost)", 1)
            time.sleep(0.2)


def _header(s: Store, name: str, run_id: str) -> str:
    """The first line `logs` prints (issue 51, item 7): the log holds the
    agent's bytes from offset 0 and loopctl's own lines (how the run
    started, how it ended) after them (engine/run_context.RunLog), so a
    reader was shown the output before any word of which run it was. Taken
    from the run's record (or the state, for a run in flight), never from
    the log, which the agent writes."""
    from loopctl.domain.timestamps import iso
    from loopctl.storage.runs import load_record

    record = load_record(s.paths.run_record(name, run_id), run_id) or RunRecord(run_id=run_id)
    live = live_run(s.read_state(), name)
    iteration = record.iteration or live.get("iteration")
    started = record.started_at or live.get("started_at")
    if isinstance(started, (int, float)):
        started = iso(started)
    said = f"# loopctl: run {run_id} of {name}"
    said += f" (iteration {iteration})" if isinstance(iteration, int) else ""
    said += f", started {started}" if isinstance(started, str) else ""
    if isinstance(record.outcome, str):
        said += f", ended {record.outcome} (exit code {record.exit_code})"
    return said + ": the output comes first; loopctl's own lines follow it, at the end"


def _run_exit(s: Store, name: str, run_id: str) -> int:
    """`logs -f`'s exit code: the followed run's, as `loopctl run` gives it."""
    from loopctl.engine.supervisor import exit_code_for
    from loopctl.storage.runs import load_record

    record = load_record(s.paths.run_record(name, run_id), run_id)
    return exit_code_for(record) if record is not None else 1


def _run_in_flight(s: Store, name: str, run_id: str) -> bool:
    """The run is still claimed in state and its supervisor is alive (by
    its claim, when another machine of a team store runs it)."""
    from loopctl.engine.team_state import alive_for

    try:
        state = s.read_state()
        run = live_run(state, name)
        return run.get("run_id") == run_id and alive_for(s, state)(run.get("supervisor"))
    except LoopctlError:
        return True  # cannot tell: keep following


def history(name: NameArg,
            limit: Annotated[int, typer.Option(min=0, help="Most recent N runs (0 = all).")] = 20,
            skipped: Annotated[bool, typer.Option("--skipped", help="List the due slots that did not run, with the reason, instead.")] = False,
            as_json: JsonOpt = False) -> None:
    """List a loop's past runs."""
    if skipped:
        _skipped_slots(name, limit, as_json)
        return
    found = reading.runs_of(store(), name, limit)
    if as_json:
        emit(found.to_json())
        return
    records = found.runs
    if not records:
        print(f"{name} has no finished runs yet")
        return
    checked = any(r.check for r in records)
    headers, rows, drop = _history_table(records, checked)
    # RUN and STARTED are never cut: they say which run and when; TOOK,
    # then EXIT, then COST go before any cell is cut.
    shown = table(headers, rows, keep=(0, 1), drop=drop).splitlines()
    print("\n".join(_with_reasons(shown, _unfolded(records))))
    if found.truncated:
        print(f"(showing the newest {len(records)} runs; older runs were not read from "
              "the team store)")
    total = _total_cost(records)
    if total is not None:
        print(total)
    if checked:
        print(fit_line(["CHECK:"], [CHECK_LEGEND]))
    if any(r.protected for r in records):
        print(PROTECTED_LEGEND)
    gated = found.skipped
    if gated:
        said = one_line(str(gated.last_gate_output or "").strip()) or "(no output)"
        print(fit_line([f"{gated.count} fire(s) skipped by the gate; last "
                        f"({gated.last_run_id}) said:"], [said]))
    handed = [r for r in records if r.handoff]
    if handed:
        print()
        for r in handed:
            fixed, free = handoff_parts(r.to_json())
            print(fit_line([r.run_id + " ", *fixed], free))


def _skipped_slots(name: str, limit: int, as_json: bool) -> None:
    """`history NAME --skipped`: one line per due slot that did not run."""
    found = reading.skipped_slots_of(store(), name, limit)
    if as_json:
        emit(found.to_json())
        return
    entries = found.skipped_slots
    if not entries:
        print(f"{name} has no skipped slots")
        return
    rows = [[str(e.get("at") or "-"), str(e.get("slot") or "-"), str(e.get("reason")),
             " ".join(f"{k} {e[k]}" for k in ("count", "run_id", "kind", "machine") if e.get(k) is not None)]
            for e in entries]
    print(table(["AT (UTC)", "SLOT", "REASON", "DETAIL"], rows, keep=(0, 2)))


def _history_table(records: list[RunRecord], checked: bool
                   ) -> tuple[list[str], list[list[str]], tuple[int, ...]]:
    """Headers, rows and the columns dropped first: CHECK with a check
    (DESIGN §16), COST when any run has one."""
    rows = _history_rows(records)
    headers = ["RUN", "STARTED (UTC)", "TOOK", "OUTCOME", "EXIT", "DECISION"]
    drop: tuple[int, ...] = (2, 4)
    shown = _unfolded(records)
    if any(cost_of(r) is not None for r in records):
        rows = [row + [_cost_cell(r)] for row, r in zip(rows, shown, strict=True)]
        headers.append("COST")
        drop = (2, 4, len(headers) - 1)
    if checked:  # the check's word on each run
        rows = [row + [_check_short(r.check)] for row, r in zip(rows, shown, strict=True)]
        headers.append("CHECK")
    if any(r.machine for r in shown):  # a team store's (DESIGN §21)
        rows = [row + [str(r.machine or "")] for row, r in zip(rows, shown, strict=True)]
        headers.append("MACHINE")
    return headers, rows, drop


def cost_of(record: RunRecord) -> float | None:
    """The run's cost in dollars, if a finite, non-negative one was recorded."""
    import math

    cost = record.cost_usd
    if isinstance(cost, bool) or not isinstance(cost, (int, float)):
        return None
    return float(cost) if math.isfinite(cost) and cost >= 0 else None


def _cost_cell(record: RunRecord) -> str:
    from loopctl.domain.durations import format_usd

    cost = cost_of(record)
    if cost is None:
        return "-"
    return ("~" if record.cost_estimated else "") + format_usd(cost)


def _total_cost(records: list[RunRecord]) -> str | None:
    """`total: $1.23 over 12 runs shown (~: estimated)`, when any run has a cost."""
    from loopctl.domain.durations import format_usd

    costs = [c for c in map(cost_of, records) if c is not None]
    if not costs:
        return None
    estimated = any(r.cost_estimated and cost_of(r) is not None for r in records)
    return (f"total: {format_usd(sum(costs))} over {len(records)} run(s) shown"
            + (" (~: estimated)" if estimated else ""))


def _history_rows(records: list[RunRecord]) -> list[list[str]]:
    """One row per run; skipped fires in a row fold into one (`skipped x12`)."""
    rows: list[list[str]] = []
    folded = 0
    for r in records:
        duration = r.duration_s
        exit_code = r.exit_code
        if r.outcome == "skipped" and folded:
            folded += 1
            rows[-1][0], rows[-1][1] = r.run_id, _started(r)
            rows[-1][3] = f"skipped x{folded}"
            continue
        folded = 1 if r.outcome == "skipped" else 0
        rows.append([r.run_id, _started(r),
                     format_duration(duration) if duration is not None else "-",
                     str(r.outcome) + ("*" if r.protected else ""),
                     "-" if exit_code is None else str(exit_code),
                     _decision_cell(r)])
    return rows


def _with_reasons(lines: list[str], records: list[RunRecord]) -> list[str]:
    """The table's lines, each failed run's followed by its reason, indented
    (a column would leave a reason a few characters at 80 columns)."""
    from loopctl.domain.reason import run_reason

    out = lines[:1]
    for text, record in zip(lines[1:], records, strict=True):
        why = run_reason(record)
        out += [text, fit_line(["   "], [why])] if why else [text]
    return out


def _unfolded(records: list[RunRecord]) -> list[RunRecord]:
    """The record behind each row of _history_rows (the last of a fold)."""
    out: list[RunRecord] = []
    for r in records:
        if r.outcome == "skipped" and out and out[-1].outcome == "skipped":
            out[-1] = r
        else:
            out.append(r)
    return out


def _check_short(check: CheckRecord | None) -> str:
    if not check:
        return "-"
    said = "pass" if check.passed else f"fail {check.exit_code or '-'}"
    metric = check.metric
    return said + (f" {metric:g}" if metric is not None else "")


# Under a table with a CHECK column: its cells are short to fit 80 columns,
# so one line says what their numbers are.
CHECK_LEGEND = "pass or fail, exit code, metric; refused: a complete the check failed"
PROTECTED_LEGEND = "*: the agent changed protected paths; loopctl put them back (--json: protected)"


def _decision_cell(r: RunRecord) -> str:
    """The agent's decision, and whether it stood: a `complete` the check
    refused must not read as a completed loop (`refused` fits the column)."""
    said = (r.decision or {}).get("decision") or "-"
    if said == "complete" and "complete refused" in str(r.note or ""):
        return "refused"
    return said


def _started(r: RunRecord) -> str:
    return (r.started_at or "-").replace("T", " ").rstrip("Z")


def event_line(event: dict[str, Any]) -> str:
    """`AT  LOOP: STATUS (REASON): WHAT, evidence: HOW`; the agent's words
    are untrusted and printed as one plain line."""
    reason = f" ({event['reason']})" if event.get("reason") else ""
    head = f"{event.get('observed_at')}  {event.get('loop')}: {event.get('status')}{reason}"
    summary = str(event.get("summary") or "")
    evidence: dict[str, Any] = event.get("evidence") or {}
    if not isinstance(evidence, dict):
        evidence = {}
    proof = str(evidence.get("text") or "")
    if evidence.get("source") == "loopctl" and proof:
        summary = proof  # loopctl's summary only repeats the status
        proof = ""
    shown = one_line(head, 1000) + (f": {one_line(summary)}" if summary else "")
    return shown + (f"; evidence: {one_line(proof)}" if proof else "")


def _known_or_past(s: Store, name: str, follow: bool) -> None:
    """A removed loop's past events are still shown; a name that is not a
    loop, with no events (or followed: it would wait forever), is exit 4."""
    from loopctl.domain.checks import check_name
    from loopctl.domain.errors import NoSuchLoop

    check_name(name)
    if not s.read_defs().has(name) and (follow or not reading.read_events(s, name)):
        raise NoSuchLoop(name)


def events(name: Annotated[Optional[str], typer.Argument(help="Only this loop's events.")] = None,
           follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events.")] = False,
           as_json: JsonOpt = False) -> None:
    """Show attention events (completed, failed, paused by a limit, expired)."""
    s = store()
    if name is not None:
        _known_or_past(s, name, follow)
    seen = 0
    while True:
        found = reading.read_events(s, name)
        for event in found[seen:]:
            if as_json:
                print(json.dumps(event, sort_keys=True, allow_nan=False), flush=True)
            else:
                print(event_line(event), flush=True)
        seen = len(found)
        if not follow:
            if not found and not as_json:
                print("no attention events yet")
            return
        time.sleep(0.5)
