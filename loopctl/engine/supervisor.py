"""One run of one loop: spawn the agent, enforce the timeout, record, settle.

Scheduled runs get a supervisor process of their own, forked by the driver
into a session of its own (`firing.spawn_supervisor`) so the driver can
exit. `python -m loopctl.engine.supervisor LOOP RUN_ID` only supervises a run whose
claim names its own pid, so started by hand it refuses (tested);
`loopctl run` supervises in the foreground and copies the agent's output to
the terminal as well as the log. For scheduled runs the agent writes straight
into the log file: no byte passes through Python.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from loopctl import clock
from loopctl.domain.errors import LoopctlError
from loopctl.domain.state import RunResult
from loopctl.domain.timestamps import iso
from loopctl.engine import procs
from loopctl.engine.steps import (
    bounds,
    check,
    confine,
    context,
    gate,
    handoff,
    launch,
    notes,
    output,
    prepare,
    protect,
    settle,
    wait,
)
from loopctl.engine.steps.context import RunContext, RunLog
from loopctl.storage.runs import EXIT_FOR_OUTCOME, open_log
from loopctl.storage.store import Store

if TYPE_CHECKING:
    from loopctl.integrations.workspace import Handoff, Workspace

# Kept importable from here: the drivers and tests name them.
one_line = context.one_line
Interrupted = wait.Interrupted


class Supervisor:
    """Orders the steps of one run (loopctl.engine.steps); does none itself."""

    def __init__(self, store: Store, loop_name: str, run_id: str, foreground: bool,
                 worktree: bool | None = None, gated: bool | None = None) -> None:
        self.store = store
        self.name = loop_name
        self.run_id = run_id
        self.foreground = foreground
        # Known to the driver that claimed the run; None (a supervisor started
        # by hand) means: look in the claimed run's definition.
        self.worktree = worktree
        self.gated = gated  # likewise: does the loop have `--if`

    def run(self) -> dict[str, Any]:
        procs.become_subreaper()
        wait.interruptible()
        self.store.run_dir(self.name)
        log = RunLog(open_log(self.store.paths.run_log(self.name, self.run_id)))
        ctx = RunContext(self.store, self.name, self.run_id, self.foreground, log, [],
                         bounds.unheld(self.store.paths.state_dir, self.name, self.run_id))
        moved: Handoff | None = None
        try:
            started = clock.now()
            ws, note = prepare.prepare_workspace(ctx, self.worktree)
            gate.gate(ctx, ws, self.gated)
            launched = launch.launch(ctx, ws, note, started)
            result = self._outcome(ctx, launched, started)
            output.read_decision(ctx, result)
            notes.take_back(ctx, result)
            log.flush_held()
            protect.restore(ctx, ws, launched.loop, result)
            check.check(ctx, ws, launched, result)
            if ws is not None:
                moved = self._hand_off(ctx, ws, launched, result)
            log.write(footer(self.run_id, result))
        finally:
            confine.release(ctx)
            log.flush_held()
            bounds.end(ctx)
            log.close()
        record = settle.run_record(ctx, launched.run, launched.argv, result, moved)
        return settle.settle(ctx, launched.loop, launched.run, result, record, moved)

    @staticmethod
    def _hand_off(ctx: RunContext, ws: Workspace, launched: launch.Launched,
                  result: RunResult) -> Handoff:
        cancelled = handoff.cancellation(ctx)
        # A failing check, or protected paths not put back, hand nothing off.
        loop = protect.hold(ctx, check.held_loop(launched.loop, result))
        made = handoff.commit(ctx, ws, loop, launched.run, result)
        moved = handoff.hand_off(ctx, ws, loop, launched.run, made, result, cancelled)
        return check.mark_held(ctx, loop is not launched.loop, moved)

    @staticmethod
    def _outcome(ctx: RunContext, launched: launch.Launched, started: float) -> RunResult:
        if gate.blocked(ctx):
            return gate.outcome(ctx, started)
        if launched.proc is None:
            return RunResult("failed", 127, started, clock.now(), note=launched.note)
        result = wait.wait(ctx, launched.proc, launched.loop, started)
        output.read_result(ctx, launched.loop, result)
        return result


def footer(run_id: str, result: RunResult) -> str:
    return (f"# loopctl: run {run_id} ended {iso(result.ended_at)}: "
            f"outcome {result.outcome}, exit code {result.exit_code}, "
            f"{result.ended_at - result.started_at:.1f}s"
            + (f" ({result.note})" if result.note else ""))


def exit_code_for(record: dict[str, Any]) -> int:
    """The run's exit code, which follows its check: an agent that
    succeeded but whose check failed, could not start or was not run is 1."""
    code = EXIT_FOR_OUTCOME.get(record.get("outcome", "failed"), 1)
    if code == 0 and record.get("outcome") == "ok":
        from loopctl.domain.verify import failed_verification

        return 1 if failed_verification(record) else 0
    return code


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m loopctl.engine.supervisor LOOP RUN_ID", file=sys.stderr)
        return 2
    try:
        record = Supervisor(Store(), argv[0], argv[1], foreground=False).run()
    except LoopctlError as exc:
        print(f"loopctl supervisor: {exc.message}", file=sys.stderr)
        return exc.code
    return exit_code_for(record)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
