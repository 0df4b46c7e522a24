"""The reading commands: `watch`, `ls`, `status`, `show`, `events`, `logs`,
`history`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from loopctl import clock
from loopctl.cli.direct import listing
from loopctl.cli.options import JsonOpt, NameArg, emit, fail, store, ts
from loopctl.cli.render import (
    STATUS_STYLE,
    ago,
    fit_line,
    held_until,
    outcome_strip,
    paint,
    relative,
    table,
)
from loopctl.commands import common
from loopctl.commands import views as reading
from loopctl.domain.durations import format_duration, format_rough, format_usd
from loopctl.domain.errors import LoopctlError
from loopctl.domain.reason import one_line
from loopctl.domain.untrusted import line
from loopctl.storage.store import Store


def watch(interval: Annotated[float, typer.Option(min=0.5, max=3600, help="Seconds between refreshes.")] = 2.0) -> None:
    """Live view of every loop; q or Ctrl-C quits (not a terminal: one snapshot)."""
    from loopctl.cli import watch as watcher

    raise typer.Exit(watcher.main(store(), interval))


LS_STATUSES = tuple(STATUS_STYLE)


def ls(as_json: JsonOpt = False,
       only: Annotated[Optional[str], typer.Option("--status", help=f"Only loops of this status ({', '.join(LS_STATUSES)}).")] = None,
       sort: Annotated[Optional[str], typer.Option("--sort", help="Order: next (soonest fire first), last (latest run first) or name.")] = None) -> None:
    """List loops: schedule, status, runs used, next fire, last outcome."""
    from loopctl.cli.direct import ls_text
    from loopctl.cli.render import SORTS

    if only is not None and only not in LS_STATUSES:
        fail(f"bad --status {only!r}: expected one of {', '.join(LS_STATUSES)}", 2)
    if sort is not None and sort not in SORTS:
        fail(f"bad --sort {sort!r}: expected next, last or name", 2)
    with common.no_cycle_collection():
        if as_json:
            loops = listing(store()) if not (only or sort) else _picked_json(only, sort)
            emit({"version": common.JSON_VERSION, "loops": loops})
            return
        ls_text(store(), only, sort)


def _picked_json(only: str | None, sort: str | None) -> list[dict[str, Any]]:
    """`ls --json --status/--sort`: the LOOP objects, picked and ordered as
    the table's rows."""
    from loopctl.cli.render import picked

    loops = reading.list_loops(store())
    keyed = [{"name": loop["name"], "status": loop["status"], "loop": loop,
              "next_fire": ts(loop.get("next_fire")),
              "last_end": ts((loop.get("last_run") or {}).get("ended_at"))} for loop in loops]
    return [row["loop"] for row in picked(keyed, only, sort)]


def status(name: Annotated[Optional[str], typer.Argument(help="Loop name (default: all).")] = None,
           as_json: JsonOpt = False) -> None:
    """Show where a loop stands (all loops without NAME)."""
    if name is None:
        if as_json:
            with common.no_cycle_collection():
                emit({"version": common.JSON_VERSION, "loops": listing(store())})
        else:
            ls(as_json=False)
        return
    with common.no_cycle_collection():
        info = reading.status(store(), name, for_people=not as_json)
    if as_json:
        emit(dict(info, version=common.JSON_VERSION))
        return
    if info.get("queued_since"):  # its place among the queued (read only then)
        from loopctl.cli.render import queue_places

        info["queue_place"] = queue_places(reading.list_brief(store())).get(name)
    print(render_status(info))


def _limit_lines(info: dict[str, Any]) -> list[str]:
    """The bounds of each run, as the settings table names them."""
    from loopctl.domain.loop_settings import LIMITS, shown

    limits = info.get("limits") or {}
    if not limits:
        return []
    return [fit_line(["  limits    "], [", ".join(f"{s.limit} {shown(s, limits.get(s.key))}"
                                                for s in LIMITS)])]


def _gate_lines(info: dict[str, Any]) -> list[str]:
    """The loop's gate and the triggers waiting for a fire (DESIGN §17)."""
    import shlex

    lines = []
    if info.get("gate"):
        lines.append(fit_line(["  gate      "], [one_line(shlex.join(info["gate"]["argv"]))]))
    if info.get("triggers_pending"):
        lines.append(f"  triggered  {info['triggers_pending']} time(s); fires at the next "
                     "driver pass" + (" after the run" if info.get("current_run") else ""))
    return lines


def _check_lines(info: dict[str, Any]) -> list[str]:
    """The loop's check and what it said last (DESIGN §16)."""
    import shlex

    lines = []
    if info.get("check"):
        until = " (completes the loop when it passes)" if info["check"]["until_check"] else ""
        lines.append(fit_line(["  check     "], [one_line(shlex.join(info["check"]["argv"]))
                                                 + until]))
    # A check removed since (`--check none`) says nothing more in the status.
    last = info.get("last_check") if info.get("check") else None
    if last:
        lines.append(f"  last check {check_cell(last)} ({last['run_id']})")
    protected = (info.get("workspace") or {}).get("protect")
    if protected:
        lines.append(fit_line(["  protect   "], [one_line(", ".join(protected))]))
    return lines


def check_cell(check: dict[str, Any]) -> str:
    """`passed`, `failed (exit 1)`, `failed (no exit code)`, with `metric 42`."""
    why = one_line(str(check.get("why") or "no exit code"))
    said = "passed" if check.get("passed") else "failed (" + (
        f"exit {check['exit_code']}" if check.get("exit_code") is not None else why) + ")"
    metric = check.get("metric")
    return said + (f", metric {metric:g}" if isinstance(metric, (int, float)) else "")


def _pr_lines(info: dict[str, Any]) -> list[str]:
    """The PR the loop follows for PR feedback (DESIGN §16)."""
    pr = info.get("pr_feedback")
    if not pr:
        return []
    limit = (info.get("workspace") or {}).get("fix_attempts")
    how = "left for review" if pr["review"] else f"{pr['fixes']} fix run(s) of {limit}" \
        if limit else "not followed (PR feedback is off: no --pr, or --fix-attempts 0)"
    return [f"  pr         {pr['url']}: {how}"]


def _next_fire(info: dict[str, Any], now: float) -> str:
    if info.get("queued_since"):
        place = f"{info['queue_place']} in the queue, " if info.get("queue_place") else ""
        return (f"when a slot frees ({place}queued {ago(ts(info['queued_since']), now)}; "
                "max_concurrent)")
    return relative(ts(info["next_fire"]), now) + _backoff(info)


def _backoff(info: dict[str, Any]) -> str:
    """` (backoff x2 after 1 failure)`: an interval loop waits longer after
    failures (DESIGN §7); a cron loop keeps its slots, so it says nothing."""
    from loopctl.domain.schedule import backoff_factor

    failures = info["failures"]["consecutive"]
    schedule = info["schedule"]
    if not failures or not info.get("next_fire") or schedule.get("cron") \
            or schedule.get("on_demand"):
        return ""
    return f" (backoff x{backoff_factor(failures)} after {failures} " \
        f"failure{'' if failures == 1 else 's'})"


def _status_text(info: dict[str, Any]) -> str:
    status = info["status"] + (f" ({info['reason']})" if info.get("reason") else "")
    if info["status"] == "held":  # by its account (DESIGN §18)
        return status + held_until(info.get("rate_limited_until"))
    if info.get("rate_limited_until"):
        until = time.strftime("%H:%M", time.localtime(ts(info["rate_limited_until"]) or 0))
        return f"rate_limited until {until}"
    return status


def _deferral_lines(info: dict[str, Any]) -> list[str]:
    deferrals = info.get("deferrals") or {}
    if not deferrals.get("consecutive"):
        return []
    return [f"  deferrals  {deferrals['consecutive']} in a row" + (
        f" (pauses at {deferrals['limit']})" if deferrals.get("limit") else "")]


def render_status(info: dict[str, Any]) -> str:
    now = clock.now()
    if info["status"] == "invalid":
        return f"{line(info['name'])}: invalid\n  {line(info['error'])}"
    status = _status_text(info)
    limit = info["runs"]["limit"]
    fail_limit = info["failures"]["limit"]
    cost = info["cost_usd"]
    spent = ("at least " if cost.get("estimated") else "") + format_usd(cost["spent"])
    lines = [
        f"{line(info['name'])}: {paint(line(status), STATUS_STYLE.get(info['status']))}",
        f"  schedule   {info['schedule']['text']}",
        f"  runs       {info['runs']['used']}/{limit if limit else 'unlimited'}",
        f"  failures   {info['failures']['consecutive']} in a row"
        + (f" (pauses at {fail_limit})" if fail_limit else ""),
        f"  cost       {spent}"
        + (f" of {format_usd(cost['budget'])}" if cost["budget"] is not None
           else " (no budget)"),
        f"  deadline   in {format_rough(info['deadline_remaining_s'])} ({info['deadline']})",
        f"  next fire  {_next_fire(info, now)}",
    ]
    lines += _limit_lines(info) + _deferral_lines(info) + _gate_lines(info) + _check_lines(info)
    if info.get("current_run"):
        lines.append(f"  running    {info['current_run']['run_id']}")
    if info.get("last_run"):
        last = info["last_run"]
        lines.append(f"  last run   {last['run_id']} {last['outcome']} "
                     f"{ago(ts(last['ended_at']), now)}")
        if last.get("reason"):  # whole: one loop's reason is what `status` is for
            lines.append(f"  reason     {last['reason']}")
    if info.get("fix"):
        lines.append(f"  fix        {info['fix']}")
    if info.get("recent_outcomes"):
        lines.append(f"  recent     {outcome_strip(info['recent_outcomes'])}")
    if info.get("last_decision"):
        d = info["last_decision"]
        lines.append(f"  decision   {d.get('decision')}: {d.get('summary') or ''}".rstrip())
    if info.get("hook_error"):
        lines.append(f"  hook error {info['hook_error']['message']} ({info['hook_error']['at']})")
    if info.get("notify_error"):
        error = info["notify_error"]
        lines.append(f"  notify error {error['message']} ({error['at']})")
    if info.get("last_handoff"):
        lines.append(f"  hand-off   {_handoff_text(info['last_handoff'])}")
    lines += _pr_lines(info)
    if info.get("note"):
        lines.append(f"  note       {info['note']}")
    # One field, one line: agent summaries and hand-edited text cannot forge
    # a line (the first is already clean, and painted).
    return "\n".join([lines[0], *(line(text) for text in lines[1:])])


def show(name: NameArg, as_json: JsonOpt = False,
         reveal: Annotated[bool, typer.Option("--reveal", help="Print env values and notification URLs in clear (they may hold tokens).")] = False) -> None:
    """Print a loop's definition as it stands in loops.yaml (secrets masked)."""
    data = reading.show(store(), name)
    if as_json:
        emit({"version": common.JSON_VERSION, "name": name,
              "definition": reading.definition_json(data[name], reveal=reveal)})
        return
    from loopctl.storage.yamlio import dump_yaml_doc

    shown = data[name] if reveal else reading.masked(data[name])
    print(dump_yaml_doc({name: shown}).split("\n", 1)[1], end="")


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
    current = ((s.read_state()["loops"].get(name) or {}).get("run") or {}).get("run_id")
    if run_id is not None and run_id != current and not is_known(s.paths, name, run_id):
        fail(f"no log for run {run_id!r} of {name!r}", 4)
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
        current = ((s.read_state()["loops"].get(name) or {}).get("run") or {}).get("run_id")
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


def _run_exit(s: Store, name: str, run_id: str) -> int:
    """`logs -f`'s exit code: the followed run's, as `loopctl run` gives it."""
    from loopctl.engine.supervisor import exit_code_for
    from loopctl.storage.runs import load_record

    record = load_record(s.paths.run_record(name, run_id), run_id)
    return exit_code_for(record) if record is not None else 1


def _run_in_flight(s: Store, name: str, run_id: str) -> bool:
    """The run is still claimed in state and its supervisor is alive."""
    from loopctl.engine import procs

    try:
        st = s.read_state()["loops"].get(name) or {}
    except LoopctlError:
        return True  # cannot tell: keep following
    run = st.get("run") or {}
    return run.get("run_id") == run_id and procs.alive(run.get("supervisor"))


def history(name: NameArg,
            limit: Annotated[int, typer.Option(min=0, help="Most recent N runs (0 = all).")] = 20,
            as_json: JsonOpt = False) -> None:
    """List a loop's past runs."""
    records = reading.history(store(), name, limit)
    if as_json:
        emit({"version": common.JSON_VERSION, "loop": name, "runs": records,
              "skipped": reading.skipped_summary(records)})
        return
    if not records:
        print(f"{name} has no finished runs yet")
        return
    checked = any(r.get("check") for r in records)
    rows = _history_rows(records)
    if checked:  # the check's word on each run (DESIGN §16)
        rows = [row + [_check_short(r.get("check"))]
                for row, r in zip(rows, _unfolded(records), strict=True)]
    # RUN and STARTED are never cut: they say which run and when; TOOK,
    # then EXIT, go before any cell is cut.
    headers = ["RUN", "STARTED (UTC)", "TOOK", "OUTCOME", "EXIT", "DECISION"]
    shown = table(headers + (["CHECK"] if checked else []), rows, keep=(0, 1),
                  drop=(2, 4)).splitlines()
    print("\n".join(_with_reasons(shown, _unfolded(records))))
    if checked:
        print(fit_line(["CHECK:"], [CHECK_LEGEND]))
    if any(r.get("protected") for r in records):
        print(PROTECTED_LEGEND)
    skipped = reading.skipped_summary(records)
    if skipped:
        said = one_line(str(skipped["last_gate_output"] or "").strip()) or "(no output)"
        print(fit_line([f"{skipped['count']} fire(s) skipped by the gate; last "
                        f"({skipped['last_run_id']}) said:"], [said]))
    handed = [r for r in records if r.get("handoff")]
    if handed:
        print()
        for r in handed:
            fixed, free = _handoff_parts(r)
            print(fit_line([r["run_id"] + " ", *fixed], free))


def _history_rows(records: list[dict[str, Any]]) -> list[list[str]]:
    """One row per run; skipped fires in a row fold into one (`skipped x12`)."""
    rows: list[list[str]] = []
    folded = 0
    for r in records:
        duration = r.get("duration_s")
        exit_code = r.get("exit_code")
        if r["outcome"] == "skipped" and folded:
            folded += 1
            rows[-1][0], rows[-1][1] = r["run_id"], _started(r)
            rows[-1][3] = f"skipped x{folded}"
            continue
        folded = 1 if r["outcome"] == "skipped" else 0
        rows.append([r["run_id"], _started(r),
                     format_duration(duration) if duration is not None else "-",
                     r["outcome"] + ("*" if r.get("protected") else ""),
                     "-" if exit_code is None else str(exit_code),
                     _decision_cell(r)])
    return rows


def _with_reasons(lines: list[str], records: list[dict[str, Any]]) -> list[str]:
    """The table's lines, each failed run's followed by its reason, indented
    (a column would leave a reason a few characters at 80 columns)."""
    from loopctl.domain.reason import run_reason

    out = lines[:1]
    for text, record in zip(lines[1:], records, strict=True):
        why = run_reason(record)
        out += [text, fit_line(["   "], [why])] if why else [text]
    return out


def _unfolded(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The record behind each row of _history_rows (the last of a fold)."""
    out: list[dict[str, Any]] = []
    for r in records:
        if r["outcome"] == "skipped" and out and out[-1]["outcome"] == "skipped":
            out[-1] = r
        else:
            out.append(r)
    return out


def _check_short(check: dict[str, Any] | None) -> str:
    if not check:
        return "-"
    said = "pass" if check.get("passed") else f"fail {check.get('exit_code') or '-'}"
    metric = check.get("metric")
    return said + (f" {metric:g}" if metric is not None else "")


# Under a table with a CHECK column: its cells are short to fit 80 columns,
# so one line says what their numbers are.
CHECK_LEGEND = "pass or fail, exit code, metric; refused: a complete the check failed"
PROTECTED_LEGEND = "*: the agent changed protected paths; loopctl put them back (--json: protected)"


def _decision_cell(r: dict[str, Any]) -> str:
    """The agent's decision, and whether it stood: a `complete` the check
    refused must not read as a completed loop (`refused` fits the column)."""
    said = (r.get("decision") or {}).get("decision") or "-"
    if said == "complete" and "complete refused" in str(r.get("note") or ""):
        return "refused"
    return said


def _started(r: dict[str, Any]) -> str:
    return (r.get("started_at") or "-").replace("T", " ").rstrip("Z")


def _handoff_parts(h: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(identifiers, free text) of a hand-off: the branch and PR URL are
    printed whole, the counts and git's error may be shortened."""
    fixed = [str(h.get("handoff")), str(h.get("branch") or ""), str(h.get("pr_url") or "")]
    free = []
    files = h.get("files_changed")
    if files is not None:
        free.append(f"({files} file{'' if files == 1 else 's'}, +{h.get('insertions', 0)} "
                    f"-{h.get('deletions', 0)})")
    free += [one_line(str(h[k])) for k in ("handoff_error", "needs_review") if h.get(k)]
    if h.get("left_out"):
        free.append(f"({len(h['left_out'])} file(s) over --max-file-size left out)")
    return [p for p in fixed if p], free


def _handoff_text(h: dict[str, Any]) -> str:
    """`merged loopctl/w/RUN https://... (3 files, +10 -2)`, or why it failed."""
    fixed, free = _handoff_parts(h)
    return " ".join(fixed + free)


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


def events(name: Annotated[Optional[str], typer.Argument(help="Only this loop's events.")] = None,
           follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events.")] = False,
           as_json: JsonOpt = False) -> None:
    """Show attention events (completed, failed, paused by a limit, expired)."""
    s = store()
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
