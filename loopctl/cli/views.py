"""The views of loops as they stand: `watch`, `ls`, `status`, `show`. What
the runs did (`logs`, `history`, `events`) is in cli/run_views.py.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from loopctl import clock
from loopctl.cli.direct import listing
from loopctl.cli.options import JsonOpt, NameArg, ViewJsonOpt, emit, fail, store, ts
from loopctl.cli.render import (
    STATUS_STYLE,
    ago,
    fit_line,
    held_until,
    outcome_strip,
    paint,
    relative,
)
from loopctl.commands import common
from loopctl.commands import views as reading
from loopctl.domain.durations import format_rough, format_usd
from loopctl.domain.reason import one_line
from loopctl.domain.untrusted import line

if TYPE_CHECKING:
    from loopctl.commands.loop_view import LoopObject


def watch(interval: Annotated[float, typer.Option(min=0.5, max=3600, help="Seconds between refreshes.")] = 2.0) -> None:
    """Live view of every loop; q or Ctrl-C quits (not a terminal: one snapshot)."""
    from loopctl.cli import watch as watcher

    raise typer.Exit(watcher.main(store(), interval))


LS_STATUSES = tuple(STATUS_STYLE)


def ls(as_json: ViewJsonOpt = False,
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
           as_json: ViewJsonOpt = False) -> None:
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
        emit(info.to_json())
        return
    from loopctl.commands.loop_view import InvalidLoop

    if isinstance(info, InvalidLoop):
        print(f"{line(info.name or '')}: invalid\n  {line(info.error or '')}")
        return
    if info.queued_since:  # its place among the queued (read only then)
        from loopctl.cli.render import queue_places

        info = info.told(queue_place=queue_places(reading.list_queued(store())).get(name))
    print(render_status(info))


def _limit_lines(info: LoopObject) -> list[str]:
    """The bounds of each run, as the settings table names them."""
    from loopctl.domain.loop_settings import LIMITS, shown

    limits = info.limits or {}
    if not limits:
        return []
    import textwrap

    from loopctl.cli.render import terminal_width

    # Wrapped between limits, never cut: each is one a person may need.
    said = ", ".join(one_line(f"{s.limit} {shown(s, limits.get(s.key))}").replace(" ", "\0")
                     for s in LIMITS)
    return [row.replace("\0", " ") for row in
            textwrap.wrap(said, max(terminal_width(), 40), initial_indent="  limits     ",
                          subsequent_indent=" " * 13, break_on_hyphens=False)]


def _gate_lines(info: LoopObject) -> list[str]:
    """The loop's gate and the triggers waiting for a fire (DESIGN §17)."""
    import shlex

    lines = []
    if info.gate:
        lines.append(fit_line(["  gate      "], [one_line(shlex.join(info.gate["argv"]))]))
    if info.triggers_pending:
        lines.append(f"  triggered  {info.triggers_pending} time(s); fires at the next "
                     "driver pass" + (" after the run" if info.current_run else ""))
    return lines


def _check_lines(info: LoopObject) -> list[str]:
    """The loop's check and what it said last (DESIGN §16)."""
    import shlex

    lines = []
    if info.check:
        until = " (completes the loop when it passes)" if info.check["until_check"] else ""
        lines.append(fit_line(["  check     "], [one_line(shlex.join(info.check["argv"]))
                                                 + until]))
    # A check removed since (`--check none`) says nothing more in the status.
    last = info.last_check if info.check else None
    if last:
        lines.append(f"  last check {check_cell(last)} ({last['run_id']})")
    protected = (info.workspace or {}).get("protect")
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


def _pr_lines(info: LoopObject) -> list[str]:
    """The PR the loop follows for PR feedback (DESIGN §16)."""
    pr = info.pr_feedback
    if not pr:
        return []
    limit = (info.workspace or {}).get("fix_attempts")
    how = "left for review" if pr["review"] else f"{pr['fixes']} fix run(s) of {limit}" \
        if limit else "not followed (PR feedback is off: no --pr, or --fix-attempts 0)"
    return [f"  pr         {pr['url']}: {how}"]


def _next_fire(info: LoopObject, now: float) -> str:
    if info.queued_since:
        place = f"{info.queue_place} in the queue, " if info.queue_place else ""
        return (f"when a slot frees ({place}queued {ago(ts(info.queued_since), now)}; "
                "max_concurrent)")
    return relative(ts(info.next_fire), now) + _backoff(info)


def _backoff(info: LoopObject) -> str:
    """` (backoff x2 after 1 failure)`: an interval loop waits longer after
    failures (DESIGN §7); a cron loop keeps its slots, so it says nothing."""
    from loopctl.domain.schedule import backoff_factor

    failures = info.failures["consecutive"]
    schedule = info.schedule
    if not failures or not info.next_fire or schedule.get("cron") \
            or schedule.get("on_demand"):
        return ""
    return f" (backoff x{backoff_factor(failures)} after {failures} " \
        f"failure{'' if failures == 1 else 's'})"


def _status_text(info: LoopObject) -> str:
    status = info.status + (f" ({info.reason})" if info.reason else "")
    if info.status == "held":  # by its account (DESIGN §18)
        return status + held_until(info.rate_limited_until)
    if info.rate_limited_until:
        until = time.strftime("%H:%M", time.localtime(ts(info.rate_limited_until) or 0))
        return f"rate_limited until {until}"
    return status


def _deferral_lines(info: LoopObject) -> list[str]:
    deferrals = info.deferrals or {}
    if not deferrals.get("consecutive"):
        return []
    return [f"  deferrals  {deferrals['consecutive']} in a row" + (
        f" (pauses at {deferrals['limit']})" if deferrals.get("limit") else "")]


def _skip_lines(info: LoopObject) -> list[str]:
    """`skipped N (last: REASON, WHEN)`: due slots that did not run (§20)."""
    skipped = info.skipped_slots
    if not skipped:
        return []
    last = skipped.get("last") or {}
    return [f"  skipped    {skipped['count']} (last: {last.get('reason')}, "
            f"{ago(ts(last.get('at')), clock.now())})"]


def render_status(info: LoopObject) -> str:
    now = clock.now()
    status = _status_text(info)
    limit = info.runs["limit"]
    fail_limit = info.failures["limit"]
    cost = info.cost_usd
    spent = ("at least " if cost.get("estimated") else "") + format_usd(cost["spent"])
    lines = [
        f"{line(info.name)}: {paint(line(status), STATUS_STYLE.get(info.status))}",
        f"  schedule   {info.schedule['text']}",
        f"  runs       {info.runs['used']}/{limit if limit else 'unlimited'}",
        f"  failures   {info.failures['consecutive']} in a row"
        + (f" (pauses at {fail_limit})" if fail_limit else ""),
        f"  cost       {spent}"
        + (f" of {format_usd(cost['budget'])}" if cost["budget"] is not None
           else " (no budget)"),
        f"  deadline   in {format_rough(info.deadline_remaining_s)} ({info.deadline})",
        f"  next fire  {_next_fire(info, now)}",
    ]
    lines += _limit_lines(info) + _deferral_lines(info) + _gate_lines(info) + _check_lines(info)
    lines += _skip_lines(info)
    if info.current_run:
        lines.append(f"  running    {info.current_run['run_id']}")
    if info.last_run:
        last = info.last_run
        lines.append(f"  last run   {last['run_id']} {last['outcome']} "
                     f"{ago(ts(last['ended_at']), now)}"
                     + (f" on machine {line(last['machine'])}" if last.get("machine") else ""))
        if last.get("reason"):  # whole: one loop's reason is what `status` is for
            lines.append(f"  reason     {last['reason']}")
    if info.fix:
        lines.append(f"  fix        {info.fix}")
    if info.recent_outcomes:
        lines.append(f"  recent     {outcome_strip(info.recent_outcomes)}")
    if info.last_decision:
        d = info.last_decision
        lines.append(f"  decision   {d.get('decision')}: {d.get('summary') or ''}".rstrip())
    if info.hook_error:
        lines.append(f"  hook error {info.hook_error['message']} ({info.hook_error['at']})")
    if info.notify_error:
        error = info.notify_error
        lines.append(f"  notify error {error['message']} ({error['at']})")
    if info.last_handoff:
        lines.append(f"  hand-off   {handoff_text(info.last_handoff)}")
    lines += _pr_lines(info)
    if info.note:
        lines.append(f"  note       {info.note}")
    # One field, one line: agent summaries and hand-edited text cannot forge
    # a line (the first is already clean, and painted).
    return "\n".join([lines[0], *(line(text) for text in lines[1:])])


def show(name: NameArg, as_json: JsonOpt = False,
         reveal: Annotated[bool, typer.Option("--reveal", help="Print env values and notification URLs in clear (they may hold tokens).")] = False) -> None:
    """Print a loop's definition as it stands in loops.yaml (secrets masked)."""
    data = reading.show(store(), name)
    if as_json:
        emit(data.to_json(reveal=reveal))
        return
    from loopctl.storage.yamlio import dump_yaml_doc

    shown = data.definition if reveal else data.masked()
    print(dump_yaml_doc({name: shown}).split("\n", 1)[1], end="")



def handoff_parts(h: dict[str, Any]) -> tuple[list[str], list[str]]:
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


def handoff_text(h: dict[str, Any]) -> str:
    """`merged loopctl/w/RUN https://... (3 files, +10 -2)`, or why it failed."""
    fixed, free = handoff_parts(h)
    return " ".join(fixed + free)

