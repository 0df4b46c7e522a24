"""Step 3: write the prompt, build the agent's argv and environment
(`ready`), then start it under the store lock (`start`), the claim checked
again when it starts. What the agent could have planted (the prompt file,
its `#!` line, the sandbox's folders) is read between the two reads of the
claim, with no lock held: a FIFO there fails this run only."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

from loopctl.domain.agent_cli import is_agent
from loopctl.domain.errors import LoopctlError
from loopctl.domain.model import LoopDef
from loopctl.domain.state import LoopState
from loopctl.domain.timestamps import iso
from loopctl.engine import procs
from loopctl.engine import run_bounds as bounds
from loopctl.engine.containment import confining
from loopctl.engine.launch_support import (
    agent_env,
    in_child,
    ours,
    run_answer,
    shim_dir,
    trigger_payload,
)
from loopctl.engine.run_context import Claim, Gate, Launched, Prepared, RunContext, one_line
from loopctl.fast.data_class import record
from loopctl.storage.paths import unnamed_file
from loopctl.storage.run_files import write_prompt as write_prompt_file

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import IO

    from loopctl.domain.verify import LastCheck


@record
class Ready:
    """An agent ready to start: everything read and built outside the lock."""
    argv: list[str]
    stdin_text: str | None
    cwd: str
    env: dict[str, str]
    files: list[str]  # what a sandbox grants it read-only (the shim, the prompt copy)


# The most of a prompt file loopctl reads: past it the run fails, never a
# cut objective.
MAX_PROMPT_FILE = 4 * 2**20


def with_install_hint(message: str, loop: LoopDef) -> str:
    """A preset's CLI not found: the reason also says how to install it."""
    from loopctl.agents.presets import PRESETS, install_hint

    missing = f"agent not found on PATH: {PRESETS[loop.agent or 'shell'].binary}"
    if loop.command or not message.startswith(missing):
        return message
    return message + install_hint(loop.agent)


def ready(ctx: RunContext, claim: Claim, prepared: Prepared, gate: Gate | None,
          started: float) -> tuple[Ready | None, str | None]:
    """What starting the agent needs, or None and why it cannot start (a
    failed worktree, an unreadable prompt file); None, None when the gate
    said no."""
    loop, ws = claim.loop, prepared.ws
    try:
        if loop.worktree and ws is None:
            raise LoopctlError(prepared.note or "the worktree could not be made")
        if gate is not None and gate.blocked:
            return None, None
        return _prepare(ctx, claim, prepared, gate, started), None
    except LoopctlError as exc:
        ctx.log.hold(f"# loopctl: {exc.message}")
        return None, exc.message


def start(ctx: RunContext, claim: Claim, prepared: Prepared, made: Ready | None,
          note: str | None, started: float, gate: Gate | None) -> Launched:
    """Confine and start the agent (when `made`), and record who runs it,
    under the store lock with the claim checked again."""
    launched = Launched(None, made.argv if made else [], note,
                        gate.sandbox if gate is not None else "off")
    if made is not None:
        launched.sandbox = "unavailable"  # what the record says if confining raises
        try:
            launched.confined = confining.confine(ctx, claim.loop, made.cwd, made.env,
                                                  claim.run, made.argv, made.files)
            launched.sandbox = launched.confined.sandbox
        except LoopctlError as exc:
            made, launched.note = None, exc.message
            ctx.log.hold(f"# loopctl: {exc.message}")
    with ctx.store.lock():
        state = ctx.store.read_state()
        owned = ours(ctx, state["loops"].get(ctx.name))
        st, run = owned.state, owned.run
        try:
            if made is not None:
                hook = launched.confined.hook if launched.confined else None
                launched.proc = spawn(ctx, claim.loop, made, hook)
        except LoopctlError as exc:
            launched.note = with_install_hint(exc.message, claim.loop)
            ctx.log.hold(f"# loopctl: {launched.note}")
        if ctx.found_repository is not None and st.repository is None:
            st.repository = list(ctx.found_repository)  # from now on, the record
        run["started_at"] = started
        run["workspace"] = prepared.ws.to_json() if prepared.ws else None
        run["supervisor"] = procs.ref()
        run["agent"] = procs.ref(launched.proc.pid) if launched.proc else None
        run["contain"] = ctx.bounds.held.to_json()
        ctx.store.write_state(state)
    claim.run = run
    return launched


def _prepare(ctx: RunContext, claim: Claim, prepared: Prepared, gate: Gate | None,
             started: float) -> Ready:
    loop, st, run, ws = claim.loop, claim.state, claim.run, prepared.ws
    cwd = ws.cwd if ws else os.path.expanduser(loop.cwd)
    confining.recorded_repository(ctx, st, ws)
    prompt, prompt_path = write_prompt(ctx, claim, cwd, started, prepared, gate)
    resume = st.session_id if loop.continue_session else None
    argv, stdin_text = build_argv(loop, prompt, prompt_path, ctx.run_id, resume,
                                  str(ctx.decision_path.parent))
    ctx.log.hold(f"# loopctl: run {ctx.run_id} of {ctx.name} (iteration {run['iteration']}) "
                 f"started {iso(started)} in {cwd}: {one_line(argv)}")
    env = agent_env(ctx, loop, cwd, run)
    return Ready(argv, stdin_text, cwd, env, [str(shim_dir(ctx) / "loopctl"), prompt_path])


def build_argv(loop: LoopDef, prompt: str, prompt_path: str, run_id: str,
               resume: str | None, decision_dir: str) -> tuple[list[str], str | None]:
    if loop.command:
        from loopctl.agents.command import command_argv, values_for

        return command_argv(loop, values_for(loop, prompt, prompt_path, run_id, decision_dir))
    from loopctl.agents.presets import build_argv as from_preset

    return from_preset(loop, prompt, prompt_path, run_id, resume_session=resume,
                       decision_dir=decision_dir)


def read_objective(loop: LoopDef, cwd: str) -> str:
    """The prompt file's text, re-read at every run (editing it steers the
    loop), but never through a link at any component below the loop's
    folder (nor anywhere in a path outside it), never from a FIFO or a
    device, never more than MAX_PROMPT_FILE bytes: the agent may have
    replaced a prompt file it can write."""
    from loopctl.storage.safe_open import Refused, read_file

    assert loop.prompt_file is not None
    named = os.path.normpath(os.path.join(cwd, os.path.expanduser(loop.prompt_file)))
    path = named
    for base in (cwd, os.path.expanduser(loop.cwd)):  # the folders are the user's
        base = os.path.normpath(base).rstrip("/") + "/"
        if named.startswith(base):
            path = os.path.join(os.path.realpath(base), named[len(base):])
            break
    try:
        data = read_file(path, MAX_PROMPT_FILE, whole=True)
        if data is None:
            raise LoopctlError(f"cannot read prompt file {named}: No such file or directory")
        return data.decode("utf-8")
    except Refused as exc:
        raise LoopctlError(f"prompt file refused: {exc.path}: {exc.why}") from None
    except OSError as exc:
        raise LoopctlError(f"cannot read prompt file {named}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise LoopctlError(f"cannot read prompt file {named}: not UTF-8 text") from None


def write_prompt(ctx: RunContext, claim: Claim, cwd: str, now: float, prepared: Prepared,
                 gate: Gate | None) -> tuple[str, str]:
    """The text to send and loopctl's copy of it (for `{prompt_file}`): the
    agent reads the copy, never the user's path."""
    loop, st, ws = claim.loop, claim.state, prepared.ws
    objective = loop.prompt or "" if loop.prompt_file is None else read_objective(loop, cwd)
    text = objective
    if is_agent(loop) and not loop.raw:  # presets get the envelope
        workspace = ws.to_json() if ws else None
        payload = trigger_payload(ctx)
        from loopctl.agents.envelope import wrap

        text = wrap(loop, objective, st, claim.iteration, now, workspace,
                    gate_output=gate.output if gate else None,
                    payload=payload[1] if payload else None,
                    check=last_check(ctx, loop, st),
                    pr_fix=prepared.pr_fix if ws is not None and ws.continues else None,
                    answer=answer[1] if (answer := run_answer(ctx)) else None)
    path = write_prompt_file(ctx.store.paths, ctx.name, ctx.run_id, text)
    return text, str(path)


def last_check(ctx: RunContext, loop: LoopDef, st: LoopState) -> LastCheck | None:
    """The loop's last check with its output tail, read from its record."""
    from loopctl.domain.verify import LastCheck
    from loopctl.storage.runs import read_record

    last = st.last_check
    if not loop.check or not last:
        return None
    record = read_record(ctx.store.paths, ctx.name, last["run_id"])
    tail = record.check.output_tail if record and record.check else ""
    return LastCheck(exit_code=last.get("exit_code"), passed=bool(last.get("passed")),
                     metric=last.get("metric"), why=last.get("why"), output_tail=tail)


def missing_cwd(cwd: str) -> str:
    from loopctl.domain.reason import cwd_missing

    return cwd_missing(cwd, os.path.lexists(cwd))


def spawn(ctx: RunContext, loop: LoopDef, ready: Ready,
          hook: Callable[[], None] | None) -> subprocess.Popen[bytes]:
    if not os.path.isdir(ready.cwd):  # said as it is, not as a program missing from PATH
        raise LoopctlError(missing_cwd(ready.cwd))
    stdin: IO[bytes] | int = subprocess.DEVNULL
    if ready.stdin_text is not None:
        # A file, not a pipe: an agent that never reads stdin cannot block us.
        stdin = unnamed_file(ctx.log_path.parent)
        stdin.write(ready.stdin_text.encode())
        stdin.seek(0)
    argv, cwd = ready.argv, ready.cwd
    out = bounds.agent_output(ctx, loop)
    try:
        return subprocess.Popen(argv, cwd=cwd, env=ready.env, stdin=stdin, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                close_fds=True,
                                preexec_fn=in_child(bounds.child_setup(ctx), hook))
    except subprocess.SubprocessError:  # only the sandbox hook raises one
        raise LoopctlError("sandbox unavailable: the kernel refused to confine the "
                           "agent (landlock_restrict_self)") from None
    except FileNotFoundError:
        if not os.path.isdir(cwd):  # removed in between
            raise LoopctlError(missing_cwd(cwd)) from None
        raise LoopctlError(f"agent not found on PATH: {argv[0]}") from None
    except OSError as exc:
        raise LoopctlError(f"cannot start {argv[0]}: {exc.strerror}") from None
    finally:
        if not isinstance(stdin, int):
            stdin.close()
        bounds.spawned(ctx)
