"""Step 4b: the check (`--check CMD`, DESIGN §16), after the agent, before the commit.

loopctl runs the user's command itself, after every run whose agent ran and
exited (or was killed at its timeout): not after a run a person stopped, a
`lost` run (no supervisor is left to run it), or a fire a gate skipped.
It runs as the agent did: in the run's working directory (its worktree,
before loopctl commits), with the loop's env, in the run's cgroup and its
own session, confined like the agent in a Landlock domain of its own, never
through a shell; bounded in time (`--check-timeout`, then its whole tree is
killed) and in what is kept of its output (drained, the last 64 KiB kept).
What it means for the loop is decided by domain/verify.py when the run
settles; a failing check also holds the hand-off (`handoff: check_failed`).
"""

from __future__ import annotations

import math
import os
import select
import signal
import time
from typing import TYPE_CHECKING

from loopctl.domain import verify
from loopctl.domain.errors import LoopctlError
from loopctl.domain.gates import tail_text
from loopctl.domain.model import LoopDef
from loopctl.domain.state import RunResult
from loopctl.engine import run_signals as wait
from loopctl.engine import side_command
from loopctl.engine.containment import confining
from loopctl.engine.launch_support import agent_env
from loopctl.engine.run_context import (
    Claim,
    Guarded,
    Launched,
    RunContext,
    add_dropped,
    add_note,
    one_line,
)
from loopctl.fast.data_class import replace

if TYPE_CHECKING:
    from loopctl.integrations.delivery import Handoff
    from loopctl.integrations.worktree import Workspace

# The agent ran and exited, or was killed at its timeout.
CHECKED_OUTCOMES = ("ok", "failed", "timeout", "deferred")


def check(ctx: RunContext, claim: Claim, ws: Workspace | None, launched: Launched,
          result: RunResult, guarded: Guarded | None) -> None:
    """Run the loop's check, if it has one and the agent ran; its record goes
    on `result.check`, what went wrong with it on the run's note."""
    loop = claim.loop
    if not loop.check:
        return
    if launched.proc is None or result.outcome not in CHECKED_OUTCOMES:
        ctx.log.write(f"# loopctl: check not run: the run ended {result.outcome}")
        return
    if guarded is not None and guarded.failed:  # the check would grade the agent's own tests
        ctx.log.write("# loopctl: check not run: the protected paths could not be put back")
        return
    cwd = ws.cwd if ws else os.path.expanduser(loop.cwd)
    moved = _left_worktree(ws)
    if moved:  # not run: the loop goes on as after a failing check
        ctx.log.write(f"# loopctl: {moved}")
        add_note(result, moved)
        return
    env = agent_env(ctx, loop, cwd, claim.run)
    argv = list(loop.check)
    ran = _confined_run(ctx, loop, cwd, env, claim.run, argv)
    text = tail_text(ran.output, verify.KEEP)
    metric, dropped = _metric(loop.check_metric, text)
    result.check = verify.check_record(ran.exit_code, ran.duration_s, text, metric, ran.note)
    _log(ctx, loop, argv, ran)
    if ran.note:
        add_note(result, ran.note)
    if loop.check_metric and metric is None and not dropped:
        add_note(result, "check metric: no match in the output's last 64 KiB")
    if dropped:  # on the loop too: status shows it
        add_dropped(ctx, result, [dropped])


def _left_worktree(ws: Workspace | None) -> str | None:
    """Why the check cannot run where the agent worked: the agent can
    replace the loop's folder in its worktree with a symlink to anywhere
    (the check would run, write and print there), or remove it."""
    from loopctl.integrations.worktree import escaped

    if ws is None or not escaped(ws):
        return None
    return (f"check not run: {one_line([ws.subdir or '.'])} in the worktree is no "
            "longer a folder of it (a symlink out of it, or removed)")


def _confined_run(ctx: RunContext, loop: LoopDef, cwd: str, env: dict[str, str],
                  run: dict[str, object], argv: list[str]) -> side_command.Finished:
    """The agent's confinement is over (released when its tree was gone);
    the check gets one of its own, which the record does not show."""
    handlers = {s: signal.getsignal(s) for s in wait.STOP_SIGNALS}
    wait.interruptible()  # `stop --kill` during the check kills it
    confined = None
    try:
        try:
            confined = confining.confine(ctx, loop, cwd, env, dict(run), argv, [])
        except LoopctlError as exc:  # `--sandbox on` where it cannot be honoured
            return side_command.Finished(None, b"", 0.0, f"check not run: {exc.message}",
                                         started=False)
        ctx.log.flush_held()  # the sandbox's line, before the check's
        return side_command.run(ctx, "check", argv, cwd, env, loop.check_timeout,
                                confined.hook, verify.KEEP)
    finally:
        if confined is not None:
            confined.release()
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


def _metric(pattern: str | None, text: str) -> tuple[float | None, str | None]:
    """The metric and why it was dropped. The regex runs in a forked child
    killed after verify.METRIC_SECONDS: a catastrophic pattern (`(a+)+$`)
    costs a second, not the supervisor."""
    if pattern is None:
        return None, None
    found, timed_out = first_group_bounded(pattern, text, verify.METRIC_SECONDS)
    if timed_out:
        return None, (f"check metric dropped: --check-metric took over "
                      f"{verify.METRIC_SECONDS:g}s on the output (a catastrophic regex?)")
    return verify.metric_value(found)


def first_group_bounded(pattern: str, text: str, seconds: float) -> tuple[str | None, bool]:
    """verify.first_group in a child process; (its answer, True if killed)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer through the pipe, never return
        code = 1
        try:
            # Killed by the kernel a second after the parent's deadline, even
            # if the parent was killed first: a catastrophic regex never
            # checks for signals, and an orphan would spin for hours.
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.alarm(math.ceil(seconds) + 1)
            os.close(read_end)
            found = verify.first_group(pattern, text)
            data = b"-" if found is None else b"+" + found.encode("utf-8", "replace")
            view = memoryview(data)
            while view:
                view = view[os.write(write_end, view):]
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    data, done = b"", False
    deadline = time.monotonic() + seconds
    try:
        while (left := deadline - time.monotonic()) > 0:
            if select.select([read_end], [], [], left)[0]:
                chunk = os.read(read_end, 65536)
                if not chunk:
                    done = True
                    break
                data += chunk
    finally:
        os.close(read_end)
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass  # reaped already (this supervisor is a subreaper)
    if not done or not data:
        return None, not done
    return (data[1:].decode("utf-8", "replace") if data[:1] == b"+" else None), False


def _log(ctx: RunContext, loop: LoopDef, argv: list[str],
         ran: side_command.Finished) -> None:
    """A `# loopctl: check` line, then the end of its output (at most 64 KiB,
    and a quarter of --max-log: the check's output stays within the log's
    bound too)."""
    status = f"exit code {ran.exit_code}" if ran.exit_code is not None else "no exit code"
    keep = min(verify.LOG_TAIL, loop.max_log // 4)
    shown = tail_text(ran.output, keep)
    ctx.log.write(f"# loopctl: check {one_line(argv)}: {status} after "
                  f"{ran.duration_s:.1f}s" + (f" ({ran.note})" if ran.note else "")
                  + (f"; its last {max(keep // 1024, 1)} KiB of output:" if shown else ""))
    if shown:
        ctx.log.write(shown.rstrip("\n"))


def held_loop(loop: LoopDef, result: RunResult) -> LoopDef:
    """With a failing check nothing is handed off: the hand-off sees a loop
    that only commits (the run branch is kept)."""
    check_ = result.check
    if check_ is None and not loop.check or check_ is not None and check_.passed:
        return loop
    if not loop.push:
        return loop
    return replace(loop, push=None, pr=False, merge=None)


def mark_held(ctx: RunContext, held: bool, moved: Handoff) -> Handoff:
    """`handoff: check_failed` where the check held a branch back (`held`:
    the hand-off ran with `held_loop`'s reduced loop)."""
    if held and moved.handoff == "committed":
        moved.handoff = "check_failed"
        ctx.log.write(f"# loopctl: hand-off held: the check failed; branch "
                      f"{moved.fields.get('branch')} kept, nothing pushed")
    return moved
