"""Step 2: check the claim, write the prompt, start the agent."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from loopctl.domain.errors import LoopctlError
from loopctl.domain.model import LoopDef, parse_loop
from loopctl.domain.plain import record
from loopctl.domain.state import LoopState
from loopctl.domain.timestamps import iso
from loopctl.engine import procs, reaper
from loopctl.engine.steps import bounds, confine, notes
from loopctl.engine.steps.context import RunContext, one_line
from loopctl.storage.paths import FILE_MODE, ensure_dir, unnamed_file

if TYPE_CHECKING:
    from loopctl.integrations.workspace import Workspace


@record
class Launched:
    proc: subprocess.Popen[bytes] | None  # None: it could not start (note says why)
    loop: LoopDef
    run: dict[str, Any]
    argv: list[str]
    note: str | None


@record
class Ready:
    """An agent ready to start: everything read and built outside the lock."""
    argv: list[str]
    stdin_text: str | None
    cwd: str
    env: dict[str, str]
    hook: Callable[[], None] | None


# The most of a prompt file loopctl reads: past it the run fails, never a
# cut objective.
MAX_PROMPT_FILE = 4 * 2**20


def launch(ctx: RunContext, ws: Workspace | None, note: str | None,
           started: float) -> Launched:
    """Start the run's agent and record who runs it. The claim is checked
    under the store lock before anything is read, and again when the agent
    starts; what the agent could have planted (the prompt file, its `#!`
    line, the sandbox's folders) is read between the two, with no lock
    held: a FIFO there fails this run only. `note`: why an earlier step
    failed."""
    loop, st, run = _claimed(ctx)
    ready = None
    try:
        if loop.worktree and ws is None:
            raise LoopctlError(note or "the worktree could not be made")
        if ctx.gate is None or ctx.gate.outcome is None:  # no gate, or it passed
            ready = _prepare(ctx, loop, st, run, ws, started)
    except LoopctlError as exc:
        note = exc.message
        ctx.log.hold(f"# loopctl: {exc.message}")
    proc = None
    with ctx.store.lock():
        state = ctx.store.read_state()
        st = state["loops"].get(ctx.name)
        run = _ours(ctx, st)
        try:
            if ready is not None:
                proc = spawn(ctx, loop, ready)
        except LoopctlError as exc:
            note = exc.message
            ctx.log.hold(f"# loopctl: {exc.message}")
        if ctx.found_repository is not None and st.get("repository") is None:
            st["repository"] = list(ctx.found_repository)  # from now on, the record
        run["started_at"] = started
        run["workspace"] = ws.to_json() if ws else None
        run["supervisor"] = procs.ref()
        run["agent"] = procs.ref(proc.pid) if proc else None
        run["contain"] = ctx.bounds.held.to_json()
        ctx.store.write_state(state)
    return Launched(proc, loop, run, ready.argv if ready else [], note)


def _ours(ctx: RunContext, st: LoopState | None) -> dict[str, Any]:
    run = st and st.get("run")
    if not run or run["run_id"] != ctx.run_id:
        raise LoopctlError(f"run {ctx.run_id} of {ctx.name} is not claimed; not starting")
    if not ctx.foreground and (run.get("supervisor") or {}).get("pid") != os.getpid():
        raise LoopctlError(f"run {ctx.run_id} belongs to another supervisor")
    return run


def _claimed(ctx: RunContext) -> tuple[LoopDef, LoopState, dict[str, Any]]:
    """Under the lock: the run must still be ours; its bounds are held (the
    gate held them already). The loop is the claim's definition, as it
    stands now: an `update` after this applies to the next run."""
    with ctx.store.lock():
        st = ctx.store.read_state()["loops"].get(ctx.name)
        run = _ours(ctx, st)
        assert st is not None
        loop = parse_loop(ctx.name, run["spec"])
        if not ctx.bounds.launched:
            bounds.hold(ctx, loop)
    return loop, st, run


def _prepare(ctx: RunContext, loop: LoopDef, st: LoopState, run: dict[str, Any],
             ws: Workspace | None, started: float) -> Ready:
    from loopctl.agents.presets import build_argv

    cwd = ws.cwd if ws else os.path.expanduser(loop.cwd)
    confine.recorded_repository(ctx, dict(st), ws)
    prompt, prompt_path = write_prompt(ctx, loop, cwd, st, run["iteration"], started, ws)
    ctx.prompt_path = prompt_path
    resume = st.get("session_id") if loop.continue_session else None
    argv, stdin_text = build_argv(loop, prompt, prompt_path, ctx.run_id,
                                  resume_session=resume,
                                  decision_dir=str(ctx.decision_path.parent))
    ctx.log.hold(f"# loopctl: run {ctx.run_id} of {ctx.name} (iteration {run['iteration']}) "
                 f"started {iso(started)} in {cwd}: {one_line(argv)}")
    env = agent_env(ctx, loop, cwd, run)
    notes.hand_out(ctx, loop, env)
    files = [str(shim_dir(ctx) / "loopctl"), prompt_path]
    hook = confine.confine(ctx, loop, cwd, env, run, argv, files)
    return Ready(argv, stdin_text, cwd, env, hook)


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


def write_prompt(ctx: RunContext, loop: LoopDef, cwd: str, st: LoopState, iteration: int,
                 now: float, ws: Workspace | None) -> tuple[str, str]:
    """The text to send and loopctl's copy of it (for `{prompt_file}`): the
    agent reads the copy, never the user's path."""
    from loopctl.agents.envelope import wrap
    from loopctl.agents.presets import wants_envelope

    objective = loop.prompt or "" if loop.prompt_file is None else read_objective(loop, cwd)
    text = objective
    if wants_envelope(loop):
        workspace = ws.to_json() if ws else None
        payload = trigger_payload(ctx)
        text = wrap(loop, objective, st, iteration, now, workspace,
                    gate_output=ctx.gate.output if ctx.gate else None,
                    payload=payload[1] if payload else None,
                    check=last_check(ctx, loop, st),
                    pr_fix=ctx.pr_fix if ws is not None and ws.continues else None)
    path = ctx.store.paths.run_file(ctx.name, ctx.run_id, ".prompt")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    return text, str(path)


def last_check(ctx: RunContext, loop: LoopDef, st: LoopState) -> dict[str, Any] | None:
    """The loop's last check with its output tail, read from its record."""
    from loopctl.storage.runs import read_record

    last = st.get("last_check")
    if not loop.check or not last:
        return None
    record = read_record(ctx.store.paths, ctx.name, last["run_id"]) or {}
    return {**last, "output_tail": (record.get("check") or {}).get("output_tail")}


def agent_env(ctx: RunContext, loop: LoopDef, cwd: str, run: dict[str, Any]) -> dict[str, str]:
    from loopctl.agents.presets import env_for

    env = dict(os.environ)
    env.update(env_for(loop))
    env.update({k: v for k, v in loop.env.items() if v is not None})
    env.update(LOOPCTL_LOOP=ctx.name, LOOPCTL_RUN_ID=ctx.run_id,
               LOOPCTL_ITERATION=str(run["iteration"]),
               LOOPCTL_DECISION_FILE=str(ctx.decision_path))
    payload = trigger_payload(ctx)
    env.pop("LOOPCTL_TRIGGER_FILE", None)  # only ever the run's own payload
    if payload:
        env["LOOPCTL_TRIGGER_FILE"] = str(payload[0])
    # How the next driver finds what a SIGKILLed supervisor left (reaper).
    env[reaper.MARK_VAR] = ctx.bounds.held.mark
    # Node CLIs (opencode among them) take their project from $PWD when
    # it is set; the driver's own $PWD would send the agent elsewhere.
    env["PWD"] = os.path.abspath(cwd)
    # The agent's `loopctl decide` must reach this installation, whatever
    # else is on its PATH: a one-file shim directory goes first.
    env["PATH"] = os.pathsep.join([str(shim_dir(ctx)), env.get("PATH", os.defpath)])
    return env


def trigger_payload(ctx: RunContext) -> tuple[Path, str] | None:
    """The payload of the trigger this run answers (DESIGN §17), if any."""
    from loopctl.storage.triggers import run_payload

    return run_payload(ctx.store.paths, ctx.name, ctx.run_id)


def spawn(ctx: RunContext, loop: LoopDef, ready: Ready) -> subprocess.Popen[bytes]:
    stdin: IO[bytes] | int = subprocess.DEVNULL
    if ready.stdin_text is not None:
        # A file, not a pipe: an agent that never reads stdin cannot block us.
        stdin = unnamed_file(ctx.log_path.parent)
        stdin.write(ready.stdin_text.encode())
        stdin.seek(0)
    out = bounds.agent_output(ctx, loop)
    argv, cwd = ready.argv, ready.cwd
    try:
        return subprocess.Popen(argv, cwd=cwd, env=ready.env, stdin=stdin, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                close_fds=True,
                                preexec_fn=in_child(bounds.child_setup(ctx), ready.hook))
    except subprocess.SubprocessError:  # only the sandbox hook raises one
        raise LoopctlError("sandbox unavailable: the kernel refused to confine the "
                           "agent (landlock_restrict_self)") from None
    except FileNotFoundError:
        where = "" if os.path.isdir(cwd) else f" (or working directory {cwd} missing)"
        raise LoopctlError(f"agent not found on PATH: {argv[0]}{where}") from None
    except OSError as exc:
        raise LoopctlError(f"cannot start {argv[0]}: {exc.strerror}") from None
    finally:
        if not isinstance(stdin, int):
            stdin.close()
        bounds.spawned(ctx)


def in_child(*hooks: Callable[[], None] | None) -> Callable[[], None]:
    """Between fork and exec, in order: the bounds (the cgroup must be
    joined while its files can still be written), then the sandbox."""
    steps = [hook for hook in hooks if hook is not None]

    def run_all() -> None:
        for hook in steps:
            hook()

    return run_all


def shim_dir(ctx: RunContext) -> Path:
    folder = ensure_dir(ctx.store.paths.state_dir / "bin")
    shim = folder / "loopctl"
    # Not `-m loopctl`: that would import a `loopctl/` folder from the
    # agent's working directory first. `-c` starts sys.path with it too,
    # so the first entry is dropped before loopctl is imported.
    body = (f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -c "
            "'import sys; del sys.path[0]; from loopctl.entry import main; main()' "
            '"$@"\n')
    try:
        current = shim.read_text()
    except OSError:
        current = None
    if current != body:
        from loopctl.storage.atomic import atomic_write

        atomic_write(shim, body.encode())
        os.chmod(shim, 0o700)
    return folder
