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

from loopctl import clock
from loopctl.domain.errors import LoopctlError
from loopctl.domain.model import LoopDef
from loopctl.domain.outcomes import EXIT_FOR_OUTCOME
from loopctl.domain.state import RunResult
from loopctl.domain.timestamps import iso
from loopctl.engine import procs, run_bounds, run_signals
from loopctl.engine.launch_support import read_claim
from loopctl.engine.run_context import Claim, Done, Launched, Prepared, RunContext, RunLog
from loopctl.engine.steps import launch, output, settle, wait
from loopctl.storage.runs import open_log
from loopctl.storage.store import Store

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:

    from loopctl.domain.run_record import RunRecord
    from loopctl.integrations.delivery import Handoff
    from loopctl.integrations.worktree import Workspace


class Supervisor:
    """Orders the steps of one run (loopctl.engine.steps); does none itself.
    Each step takes what it needs and returns what the next ones need; a
    step for a feature the loop does not use is never imported."""

    def __init__(self, store: Store, loop_name: str, run_id: str, foreground: bool) -> None:
        self.store = store
        self.name = loop_name
        self.run_id = run_id
        self.foreground = foreground
        self.owns_run = False  # its claim names this process: it may say why it failed

    def run(self) -> RunRecord:
        """The run, supervised. One the home cannot take (a full disk, a
        read-only remount) says so in the run's `.fault`, reserved before
        the agent starts, for the next driver pass to pause the loop."""
        from loopctl.storage import run_files

        try:
            self.store.run_dir(self.name)
            return self._run()
        except (OSError, LoopctlError) as exc:
            why = run_files.disk_fault(exc) if self.owns_run else None
            if why is not None:
                run_files.mark_unsaved(self.store.paths, self.name, self.run_id, why)
            raise

    def _run(self) -> RunRecord:
        procs.become_subreaper()
        run_signals.interruptible()
        log = RunLog(open_log(self.store.paths.run_log(self.name, self.run_id)))
        ctx = RunContext(self.store, self.name, self.run_id, self.foreground, log, [],
                         run_bounds.unheld(self.store.paths.state_dir, self.name, self.run_id))
        moved: Handoff | None = None
        launched: Launched | None = None
        done = Done()
        try:
            started = clock.now()
            claim = read_claim(ctx)
            # Reserved once the run is this supervisor's (one started by
            # hand is refused above and leaves nothing).
            from loopctl.storage.run_files import reserve_fault

            reserve_fault(self.store.paths, self.name, self.run_id)
            self.owns_run = True
            launched, result, ws = self._launched(ctx, claim, done, started)
            output.read_decision(ctx, result)
            if claim.loop.notes and done.handed is not None:
                from loopctl.engine.steps import notes

                notes.take_back(ctx, done.handed, result)
            log.flush_held()
            if ws is not None:
                moved = self._after_worktree(ctx, claim, ws, launched, result, done)
            elif claim.loop.check:
                from loopctl.engine.steps import check

                check.check(ctx, claim, None, launched, result, None)
            if claim.loop.check:
                judge(claim.loop, result)
            log.write(footer(self.run_id, result))
        finally:
            if launched is not None and launched.confined is not None:
                launched.confined.release()
            log.flush_held()
            run_bounds.end(ctx)
            log.close()
        record = settle.run_record(ctx, claim, launched, result, done, moved)
        return settle.settle(ctx, claim, result, record, done, moved)

    def _launched(self, ctx: RunContext, claim: Claim, done: Done,
                  started: float) -> tuple[Launched, RunResult, Workspace | None]:
        """The worktree, the gate, the agent started and waited for."""
        loop = claim.loop
        prepared = Prepared()
        if loop.worktree:
            from loopctl.engine.steps import prepare

            prepared = prepare.prepare_workspace(ctx, claim)
            done.pr_fix = prepared.pr_fix
        if loop.gate is not None:
            from loopctl.engine.steps import gate

            done.gate = gate.gate(ctx, claim, prepared)
        made, note = launch.ready(ctx, claim, prepared, done.gate, started)
        if made is not None and loop.notes:
            from loopctl.engine.steps import notes

            done.handed = notes.hand_out(ctx, loop, made.env)
        launched = launch.start(ctx, claim, prepared, made, note, started, done.gate)
        try:
            result = self._outcome(ctx, claim, launched, done, started)
        finally:
            if launched.confined is not None:  # the agent's tree is gone
                launched.confined.release()
        return launched, result, prepared.ws

    @staticmethod
    def _outcome(ctx: RunContext, claim: Claim, launched: Launched, done: Done,
                 started: float) -> RunResult:
        if done.gate is not None and done.gate.blocked:
            from loopctl.engine.steps.gate import outcome

            return outcome(done.gate, started)
        if launched.proc is None:
            return RunResult("failed", 127, started, clock.now(), note=launched.note)
        from loopctl.engine.team_fence import fence_for

        fence = fence_for(ctx.store, ctx.name, claim.run, launched.proc.pid)
        try:
            result = wait.wait(ctx, launched.proc, claim.loop, started)
        finally:
            if fence is not None:
                fence.stop()
        if fence is not None and fence.fenced:
            result.outcome, result.note = "killed", fence.note
        elif fence is not None and fence.kill_by is not None and result.outcome == "killed":
            result.note = (result.note or "").replace("stopped by signal SIGTERM",
                                                      fence.request_note, 1)
        output.read_result(ctx, claim.loop, result)
        return result

    @staticmethod
    def _after_worktree(ctx: RunContext, claim: Claim, ws: Workspace, launched: Launched,
                        result: RunResult, done: Done) -> Handoff:
        """Protected paths put back, the check, the commit, the hand-off."""
        from loopctl.engine.steps import check, handoff, protect

        loop = claim.loop
        done.guarded = protect.restore(ctx, ws, loop, result)
        check.check(ctx, claim, ws, launched, result, done.guarded)
        cancelled = handoff.cancellation(ctx)
        # A failing check, or protected paths not put back, hand nothing off.
        held = protect.hold(done.guarded, check.held_loop(loop, result))
        made = handoff.commit(ctx, ws, held, claim.run, result, done.guarded)
        moved = handoff.hand_off(ctx, ws, held, claim.run, made, result, cancelled)
        return check.mark_held(ctx, held is not loop, moved)


def judge(loop: LoopDef, result: RunResult) -> None:
    """A failed check is a failed run (DESIGN §16): the outcome every view
    reads, and its reason first in the note. Decided after the hand-off,
    which holds the branch itself (`handoff: check_failed`)."""
    from loopctl.domain.verify import verdict

    decided = (result.decision or {}).get("decision")
    outcome, words = verdict(loop, result.outcome, result.check, result.note, decided)
    result.check_failed = outcome != result.outcome
    result.outcome = outcome
    if words:
        result.note = f"{words}; {result.note}" if result.note else words


def footer(run_id: str, result: RunResult) -> str:
    return (f"# loopctl: run {run_id} ended {iso(result.ended_at)}: "
            f"outcome {result.outcome}, exit code {result.exit_code}, "
            f"{result.ended_at - result.started_at:.1f}s"
            + (f" ({result.note})" if result.note else ""))


def exit_code_for(record: RunRecord) -> int:
    """The run's exit code, which follows its check: an agent that
    succeeded but whose check failed, could not start or was not run is 1."""
    code = EXIT_FOR_OUTCOME.get(record.outcome or "failed", 1)
    if code == 0 and record.outcome == "ok":
        from loopctl.domain.verify import failed_verification

        return 1 if failed_verification(record) else 0
    return code


def preload(command_loop: bool = True) -> None:
    """In a driver that forks supervisors (engine/firing.py): what every
    run imports, so that each forked run finds it imported already. With
    `command_loop` false (a preset agent) its argv builder too, and in
    either case the placeholder patterns compiled: a daemon's forked runs
    would each import and compile them again, in a child that dies."""
    from loopctl.agents import command, reading  # noqa: F401
    from loopctl.domain import agent_cli  # noqa: F401
    from loopctl.engine.containment import landlock, scope  # noqa: F401
    from loopctl.storage import triggers  # noqa: F401

    if not command_loop:
        from loopctl.agents import presets  # noqa: F401
    command.PLACEHOLDER.compiled()
    command.TAKES_PROMPT.compiled()


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
