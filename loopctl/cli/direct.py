"""What `tick`, `run`, `decide`, `ls` and the JSON views do, and the route
without Typer for the plain forms of `tick` and `run NAME`.

cron starts `loopctl tick` every minute and CI scripts call `loopctl run`;
importing Typer costs ~70 ms of CPU per process (bench/README.md). `entry.py`
hands argv to `dispatch`, which takes only what `flags.plain` reads from the
tables the Typer commands declare their options from; the Typer commands call
the same functions, so there is one implementation and one parser, and
`--help` and every error come from Typer.
"""

from __future__ import annotations

import json
import sys

from loopctl.cli.flags import RUN_OPTIONS, TICK_OPTIONS, VIEW_OPTIONS, plain

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

    from loopctl.domain.run_record import RunRecord


def tick(wait: bool, as_json: bool, quiet: bool) -> int:
    from loopctl import clock
    from loopctl.engine.firing import tick as do_tick
    from loopctl.storage.store import Store

    store = Store()
    result = do_tick(store, clock.now())
    report = result.pass_report
    if not as_json:
        _say_pass(result, quiet)
    if wait:
        _wait(store, result, as_json or quiet)
    if as_json:
        print(json.dumps({"version": 1, "exit_code": result.exit_code() if wait else 0,
                          "deferred_to": result.deferred_to,
                          "fired": report.fired if report else [],
                          "skipped": report.skipped if report else [],
                          "deferred": report.deferred if report else [],
                          "queued": report.queued if report else [],
                          "still_queued": result.still_queued,
                          "lost": report.lost if report else [],
                          "runs": [r.to_json() for r in result.records]},
                         indent=2, default=str, allow_nan=False))
    return result.exit_code() if wait else 0


def _wait(store: Any, result: Any, silent: bool) -> None:
    """One line per run as it ends, one per queued loop as a slot frees and
    it starts; last, the due loops left queued, if any (exit 75)."""
    from loopctl.engine.tick_wait import wait_runs

    def ended(record: RunRecord) -> None:
        print(ended_line(record), flush=True)

    def started(fire: dict[str, Any]) -> None:
        print(f"fired {fire['loop']} ({fire['run_id']})", flush=True)

    wait_runs(store, result, None if silent else ended, None if silent else started)
    if result.still_queued:
        print(f"loopctl: {left_queued_line(result)}", file=sys.stderr, flush=True)


def left_queued_line(result: Any) -> str:
    """Why `tick --wait` did not wait for every due loop (its exit 75)."""
    names = ", ".join(result.still_queued)
    held = result.left_to
    if held:
        who = held.get("busy") or f"{held['role']} pid {held['pid']} took the lease"
        return f"not waited for, still queued (max_concurrent): {names}; {who} and starts them"
    return (f"not waited for, still queued (max_concurrent): {names}; the slots are held by "
            "runs this tick did not start: the next tick starts them")


def _say_pass(result: Any, quiet: bool) -> None:
    report = result.pass_report
    if result.deferred_to:
        holder = result.deferred_to
        who = holder.get("busy") or f"{holder['role']} pid {holder['pid']} holds the lease"
        print(f"loopctl: {who}; nothing to do", file=sys.stderr)
    elif report and not quiet:
        for fired in report.fired:
            print(f"fired {fired['loop']} ({fired['run_id']})", flush=True)
        for queued in report.queued:
            print(f"queued {queued['loop']} (due; waiting for a free slot: max_concurrent)")
        for error in report.invalid.values():
            print(f"loopctl: skipped invalid loop: {error}", file=sys.stderr)


def ended_line(record: RunRecord) -> str:
    """`tick --wait`, as each run ends: `run ID of NAME: OUTCOME (exit N);
    check failed (exit M)`."""
    from loopctl.domain.verify import check_words

    code = record.exit_code
    checked = check_words(record.check, record.note)
    return (f"run {record.run_id} of {record.loop}: {record.outcome} "
            f"({'no exit code' if code is None else f'exit {code}'})"
            + (f"; {checked}" if checked else ""))


def run(name: str, mode: str = "manual", slot: str | None = None) -> int:
    from loopctl.commands.drivers import run_now
    from loopctl.engine.supervisor import exit_code_for
    from loopctl.storage.store import Store

    store = Store()
    record = run_now(store, name, mode, slot)
    _print_result(store, record)
    print(run_line(record), file=sys.stderr)
    return exit_code_for(record)


def _print_result(store: Any, record: RunRecord) -> None:
    """A preset answering in one JSON envelope (Claude's): its result text,
    which the tee left out of the terminal; the envelope is in the log."""
    from loopctl.domain.untrusted import block
    from loopctl.engine.steps.wait import envelope_at_end

    loop = store.read_defs().loops.get(str(record.loop))
    result = record.result
    if loop is not None and envelope_at_end(loop) and isinstance(result, str) and result:
        print(block(result).rstrip("\n"), flush=True)


def run_line(record: RunRecord) -> str:
    """What `run NAME` says of the run it waited for. Without an exit code
    it says why (`exit None` told a newcomer nothing)."""
    gated = record.outcome in ("skipped", "gate_error")
    code = record.exit_code
    if code is not None:
        said = f"the gate exited {code}" if gated else f"exit {code}"
    else:
        said = f"no exit code: {_why(record, 'gate ') or 'see the log'}" if gated \
            else "no exit code"
    from loopctl.domain.verify import check_words

    checked = check_words(record.check, record.note)
    if checked == "check failed (no exit code)":  # a record from before `why`
        checked = f"check failed ({_why(record, 'check ') or 'no exit code'})"
    checked = f"; {checked}" if checked else ""
    return (f"loopctl: run {record.run_id}: {record.outcome} ({said}){checked}; "
            f"log {record.log}")


def _why(record: RunRecord, prefix: str) -> str | None:
    """The record note's part about the gate or the check (`check cannot
    start pytest: not found`, `check timed out after 10m`), one line."""
    from loopctl.domain.untrusted import line

    for part in str(record.note or "").split("; "):
        if part.startswith(prefix) and not part.startswith("check metric"):
            return line(part)[:200]
    return None


DECISIONS = ("continue", "complete", "fail", "block")


def decide(kind: str, summary: str | None, evidence: str | None, next_: str | None) -> int:
    """Write this run's decision file (`loopctl decide`, inside a run)."""
    from loopctl.commands import drivers as firing
    from loopctl.domain.durations import parse_duration
    from loopctl.domain.errors import LoopctlError

    if kind not in DECISIONS:
        raise LoopctlError(f"bad decision {kind!r}: expected continue, complete, fail or "
                           "block", 2)
    delay = parse_duration(next_, "--next") if next_ is not None else None
    firing.decide(kind, summary, evidence, delay)
    print(f"decision recorded: {kind}")
    return 0


def emit(data: Any) -> None:
    """`--json` output, byte for byte what the Typer commands print:
    `json.dumps(data, indent=2, default=str, allow_nan=False)`, written by
    `jsontext`, mostly in the C encoder (tests/cli/test_jsontext.py holds them
    equal)."""
    from loopctl.fast import jsontext

    write = sys.stdout.write
    for chunk in jsontext.chunks(jsontext.pieces(data)):
        write(chunk)
    write("\n")


def listing(store: Any) -> Any:
    """Every LOOP object for `--json`: a `jsontext.Table` of the columns
    when there are columns (written without a mapping per loop)."""
    from loopctl.commands import views as reading
    from loopctl.commands.loop_object import Same
    from loopctl.fast.jsontext import Table

    listed = reading.list_columns(store)
    if isinstance(listed, list):
        return listed
    count = len(next(iter(listed.values()), []))
    columns = list(listed.values())
    return Table(list(listed), columns, count, [type(column) is Same for column in columns])


def ls_text(store: Any, status: str | None = None, sort: str | None = None) -> int:
    """The `ls` table (the command a newcomer types most, so without Typer);
    `ls --status S --sort next|last|name` picks and orders its rows."""
    from loopctl import clock
    from loopctl.cli.render import ls_table, picked
    from loopctl.commands import views as reading

    loops = reading.list_brief(store)
    if loops and (status or sort):
        loops = picked(loops, status, sort)
        if not loops:
            print(f"no {status} loops")
            return 0
    if not loops:
        print("no loops yet. Try:  loopctl start --every 10m --name hello 'echo hello'")
    else:
        print(ls_table(loops, clock.now()))
    _daemon_cannot_write(store)
    return 0


def _daemon_cannot_write(store: Any) -> None:
    """Below the table, on stderr: the daemon holds the lease (so `tick`
    stands aside) but its passes fail, so nothing fires (storage/daemon_note.py)."""
    from loopctl.storage.daemon_note import read_error

    note = read_error(store.paths)
    if note is not None:
        print(f"warning: the daemon (pid {note['pid']}) cannot write, nothing fires until it "
              f"can: {note['error']}", file=sys.stderr)


def view_args(rest: list[str]) -> str | None:
    """The NAME of `status NAME --json` ("" for `status --json`); None for
    any other form (text status goes through Typer)."""
    for arguments in (1, 0):
        got = plain(rest, VIEW_OPTIONS, arguments) if len(rest) > arguments else None
        if got is not None and "as_json" in got[1] and got[0] != [""]:  # "": Typer's error
            return got[0][0] if got[0] else ""
    return None


def view(name: str | None, as_json: bool) -> int:
    """`ls [--json]`, `status [NAME] --json`, as the Typer commands print them."""
    from loopctl.commands import common
    from loopctl.storage.store import Store

    with common.no_cycle_collection():
        if not as_json:
            return ls_text(Store())
        if name:
            from loopctl.commands import views as reading

            emit(reading.status(Store(), name).to_json())
        else:
            emit({"version": common.JSON_VERSION, "loops": listing(Store())})
    return 0


def dispatch(args: list[str]) -> int | None:
    """The exit code if `args` is a plain `tick`, `run NAME` (without both
    --scheduled and --force), `ls [--json]` or `status [NAME] --json`; None:
    the Typer app parses it."""
    command, rest = args[:1], args[1:]
    if command == ["tick"] and (ticked := plain(rest, TICK_OPTIONS)) is not None:
        given = ticked[1]
        call = lambda: tick("wait" in given, "as_json" in given, "quiet" in given)  # noqa: E731
    elif command == ["run"] and (ran := plain(rest, RUN_OPTIONS, 1)) is not None \
            and len(ran[1]) < 2:
        (name,), modes = ran
        call = lambda: run(name, next(iter(modes), "manual"))  # noqa: E731
    elif command in (["ls"], ["list"]) and (shown := plain(rest, VIEW_OPTIONS)) is not None:
        call = lambda: view(None, "as_json" in shown[1])  # noqa: E731
    elif command == ["status"] and (asked := view_args(rest)) is not None:
        call = lambda: view(asked, True)  # noqa: E731
    else:
        return None
    try:
        return call()
    except (Exception, KeyboardInterrupt) as exc:  # one line, not a traceback
        from loopctl.cli.failure import report, wants_json

        return report(exc, wants_json(args))
