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

import os
import shlex
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from loopctl import clock
from loopctl.domain.errors import LoopctlError
from loopctl.domain.lifecycle import settle
from loopctl.domain.model import LoopDef, parse_loop
from loopctl.domain.schedule import iso
from loopctl.domain.state import RunResult
from loopctl.engine import events, procs, reaper
from loopctl.engine.logcap import CappedCopy, LogTrim, note_line
from loopctl.storage.paths import FILE_MODE, ensure_dir, unnamed_file
from loopctl.storage.runs import EXIT_FOR_OUTCOME, open_log, prune, remember
from loopctl.storage.store import Store

if TYPE_CHECKING:  # a worktree run imports it; most runs never need git
    from loopctl.integrations.workspace import Handoff, Workspace

SAVE_ATTEMPTS = 3  # a full disk may free up; waits 1 s, then 2 s
# Readers look at the start (session ids) and the end (results) of the output.
HEAD_BYTES = 64 * 1024
TAIL_BYTES = 1024 * 1024


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def kill_grace() -> float:
    from loopctl.settings import knob

    return knob("LOOPCTL_KILL_GRACE")


def _raise_interrupted(signum: int, _frame: Any) -> None:
    raise Interrupted(signum)


class Supervisor:
    def __init__(self, store: Store, loop_name: str, run_id: str, foreground: bool,
                 worktree: bool | None = None) -> None:
        self.store = store
        # Known to the driver that claimed the run; None (a supervisor started
        # by hand) means: look in the claimed run's definition.
        self.worktree = worktree
        self.paths = store.paths
        self.name = loop_name
        self.run_id = run_id
        self.foreground = foreground
        self.log_path = self.paths.run_log(loop_name, run_id)
        self.decision_path = self.paths.decision_file(loop_name, run_id)
        self.note: str | None = None
        # What the agent reported that failed a check (DESIGN §11): noted on
        # the record and on the loop, so `status` shows it.
        self.dropped: list[str] = []
        self.workspace: Workspace | None = None
        self.handoff: Handoff | None = None
        # loopctl's own log lines from before the agent ran wait for it to
        # exit: the log starts with the agent's bytes at offset 0. A header
        # there would leave every page-sized write of a flooding agent
        # straddling two pages (measured: 8-10% more CPU per byte).
        self.preamble: list[str] = []
        # Bounds (DESIGN §14): the run's processes and its log.
        self.held = reaper.Containment(reaper.run_mark(self.paths.state_dir, loop_name, run_id))
        self.launched = False  # the claim is ours: the run's folders are ours to make and remove
        self.trim: LogTrim | None = None
        self.capped: CappedCopy | None = None

    # -- the whole run -------------------------------------------------------

    def run(self) -> dict[str, Any]:
        procs.become_subreaper()
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, _raise_interrupted)
        self.store.run_dir(self.name)
        self.log_fd = log_fd = open_log(self.log_path)
        self.log_truncated = False
        try:
            started = clock.now()
            self._prepare_workspace()
            proc, loop, run, argv = self._launch(log_fd, started)
            if proc is None:
                result = RunResult("failed", 127, started, clock.now(), note=self.note)
            else:
                result = self._wait(proc, loop, log_fd, started)
            if proc is not None:
                self._read_result(loop, result)
            self._read_decision(result)
            self._flush_preamble(log_fd)
            if self.workspace is not None:
                self._hand_off(loop, run, result, log_fd)
            self._write_line(log_fd, f"# loopctl: run {self.run_id} ended {iso(result.ended_at)}: "
                             f"outcome {result.outcome}, exit code {result.exit_code}, "
                             f"{result.ended_at - result.started_at:.1f}s"
                             + (f" ({result.note})" if result.note else ""))
        finally:
            self._flush_preamble(log_fd)
            self._end_bounds(log_fd)
            os.close(log_fd)
        return self._settle(loop, run, argv, result)

    # -- the worktree (--worktree) ----------------------------------------------

    def _prepare_workspace(self) -> None:
        """A fresh worktree for this run, made outside the store lock (a
        fetch may take a while); a failure is noted and the run fails."""
        if self.worktree is False:
            return  # no second read of the state for the common case
        from loopctl.integrations import workspace

        with self.store.lock():
            st = self.store.read_state()["loops"].get(self.name) or {}
            run = st.get("run") or {}
            if run.get("run_id") != self.run_id:
                return  # _launch says why
            loop = parse_loop(self.name, run["spec"])
        if not loop.worktree:
            return
        folder = self.paths.state_dir / "worktrees" / self.name
        try:
            ensure_dir(folder.parent)
            self.workspace = workspace.prepare(loop, self.run_id, folder)
            self.preamble.append(f"# loopctl: worktree {folder} on branch "
                                 f"{self.workspace.branch} from {self.workspace.base_ref}")
        except LoopctlError as exc:
            self.note = f"worktree: {exc.message}"

    def _hand_off(self, loop: LoopDef, run: dict[str, Any], result: RunResult,
                  log_fd: int) -> None:
        """Commit what the agent left, remove the worktree, hand the branch off.
        Further signals wait: a half-made commit or push helps no one."""
        from loopctl.integrations import workspace

        assert self.workspace is not None
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)
        decision = result.decision or {}
        first = (result.result_text or "").strip().splitlines()[:1]
        what = decision.get("summary") or (first[0] if first else result.outcome)
        message = f"loopctl: {loop.name} run {run['iteration']}: {what}"[:200]
        body = (f"{loop.prompt or 'file:' + str(loop.prompt_file)}\n\n"
                f"Decision: {decision.get('decision') or '-'}: {decision.get('summary') or '-'}"
                f"\nEvidence: {decision.get('evidence') or '-'}\nRun: {self.run_id}\n"
                f"Cost: ${result.cost_usd or 0:.4f}\n")[:60000]
        self.handoff = workspace.finish(self.workspace, loop, self.run_id, message, body)
        fields = self.handoff.record()
        self._write_line(log_fd, "# loopctl: hand-off " + ", ".join(
            f"{k} {v}" for k, v in fields.items() if v is not None))

    # -- launching -----------------------------------------------------------

    def _launch(self, log_fd: int, started: float) -> tuple[
            subprocess.Popen[bytes] | None, LoopDef, dict[str, Any], list[str]]:
        from loopctl.agents.presets import build_argv

        with self.store.lock():
            state = self.store.read_state()
            st = state["loops"].get(self.name)
            run = st and st.get("run")
            if not run or run["run_id"] != self.run_id:
                raise LoopctlError(f"run {self.run_id} of {self.name} is not claimed; not starting")
            if not self.foreground and (run.get("supervisor") or {}).get("pid") != os.getpid():
                raise LoopctlError(f"run {self.run_id} belongs to another supervisor")
            loop = parse_loop(self.name, run["spec"])
            self.launched = True
            self.held = reaper.contain(self.paths.state_dir, self.name, self.run_id)
            for note in reaper.apply_limits(self.held, loop.max_memory, loop.max_procs):
                self.preamble.append(f"# loopctl: {note}")
            ensure_dir(self.decision_path.parent)
            cwd = self.workspace.cwd if self.workspace else os.path.expanduser(loop.cwd)
            argv: list[str] = []
            proc = None
            try:
                if loop.worktree and self.workspace is None:
                    raise LoopctlError(self.note or "the worktree could not be made")
                prompt, prompt_path = self._prompt(loop, cwd, st, run["iteration"], started)
                resume = st.get("session_id") if loop.continue_session else None
                argv, stdin_text = build_argv(loop, prompt, prompt_path, self.run_id,
                                              resume_session=resume,
                                              decision_dir=str(self.decision_path.parent))
                self.preamble.append(f"# loopctl: run {self.run_id} of {self.name} "
                                     f"(iteration {run['iteration']}) started {iso(started)} "
                                     f"in {cwd}: {one_line(argv)}")
                proc = self._spawn(loop, argv, stdin_text, cwd, log_fd, run)
            except LoopctlError as exc:
                self.note = exc.message
                self.preamble.append(f"# loopctl: {exc.message}")
            run["started_at"] = started
            run["workspace"] = self.workspace.to_json() if self.workspace else None
            run["supervisor"] = procs.ref()
            run["agent"] = procs.ref(proc.pid) if proc else None
            run["contain"] = self.held.to_json()
            self.store.write_state(state)
        return proc, loop, run, argv

    def _prompt(self, loop: LoopDef, cwd: str, st: dict[str, Any], iteration: int,
                now: float) -> tuple[str, str]:
        """The text to send and a file holding it (for `{prompt_file}`)."""
        from loopctl.agents.envelope import wrap
        from loopctl.agents.presets import wants_envelope

        if loop.prompt_file is None:
            objective = loop.prompt or ""
        else:
            source = Path(cwd, os.path.expanduser(loop.prompt_file))
            try:
                # Re-read at every run: editing the file steers the loop.
                objective = source.read_text()
            except (OSError, UnicodeDecodeError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
                raise LoopctlError(f"cannot read prompt file {source}: {reason}") from None
            if not wants_envelope(loop):
                return objective, str(source)
        workspace = self.workspace.to_json() if self.workspace else None
        text = wrap(loop, objective, st, iteration, now, workspace) \
            if wants_envelope(loop) else objective
        path = self.paths.run_file(self.name, self.run_id, ".prompt")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        return text, str(path)

    def _spawn(self, loop: LoopDef, argv: list[str], stdin_text: str | None, cwd: str,
               log_fd: int, run: dict[str, Any]) -> subprocess.Popen[bytes]:
        from loopctl.agents.presets import env_for

        env = dict(os.environ)
        env.update(env_for(loop))
        env.update({k: v for k, v in loop.env.items() if v is not None})
        env.update(LOOPCTL_LOOP=self.name, LOOPCTL_RUN_ID=self.run_id,
                   LOOPCTL_ITERATION=str(run["iteration"]),
                   LOOPCTL_DECISION_FILE=str(self.decision_path))
        # How the next driver finds what a SIGKILLed supervisor left (reaper).
        env[reaper.MARK_VAR] = self.held.mark
        # Node CLIs (opencode among them) take their project from $PWD when
        # it is set; the driver's own $PWD would send the agent elsewhere.
        env["PWD"] = os.path.abspath(cwd)
        # The agent's `loopctl decide` must reach this installation, whatever
        # else is on its PATH: a one-file shim directory goes first.
        env["PATH"] = os.pathsep.join([str(self._shim_dir()), env.get("PATH", os.defpath)])
        stdin: IO[bytes] | int = subprocess.DEVNULL
        if stdin_text is not None:
            # A file, not a pipe: an agent that never reads stdin cannot block us.
            stdin = unnamed_file(self.log_path.parent)
            stdin.write(stdin_text.encode())
            stdin.seek(0)
        out: int = subprocess.PIPE if self.foreground else log_fd
        if self.foreground:
            self.capped = CappedCopy(log_fd, loop.max_log)
        procs_fd = reaper.open_procs(self.held)
        try:
            return subprocess.Popen(argv, cwd=cwd, env=env, stdin=stdin, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    close_fds=True,
                                    preexec_fn=reaper.child_setup(os.getpid(), procs_fd))
        except FileNotFoundError:
            where = "" if os.path.isdir(cwd) else f" (or working directory {cwd} missing)"
            raise LoopctlError(f"agent not found on PATH: {argv[0]}{where}") from None
        except OSError as exc:
            raise LoopctlError(f"cannot start {argv[0]}: {exc.strerror}") from None
        finally:
            if not isinstance(stdin, int):
                stdin.close()
            if procs_fd is not None:
                os.close(procs_fd)

    def _shim_dir(self) -> Path:
        folder = ensure_dir(self.paths.state_dir / "bin")
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
            from loopctl.storage.store import atomic_write

            atomic_write(shim, body.encode())
            os.chmod(shim, 0o700)
        return folder

    # -- waiting -------------------------------------------------------------

    def _wait(self, proc: subprocess.Popen[bytes], loop: LoopDef, log_fd: int,
              started: float) -> RunResult:
        tee = self._start_tee(proc, log_fd) if self.foreground else None
        if not self.foreground:
            self.trim = LogTrim(log_fd, loop.max_log)
            self.trim.start()
        outcome = None
        try:
            proc.wait(timeout=loop.timeout)
        except subprocess.TimeoutExpired:
            outcome, self.note = "timeout", f"timed out after {loop.timeout}s"
            self._kill(proc)
        except Interrupted as exc:
            outcome, self.note = "killed", f"stopped by signal {signal.Signals(exc.signum).name}"
            self._kill(proc)
        leftovers = procs.descendants()
        if leftovers:
            procs.kill_tree(None, min(kill_grace(), 2.0))
        # The polite round above works from snapshots; this one loops until
        # nothing the run started is left (forkers, TERM-ignorers, setsid).
        killed = len({p.pid for p in leftovers} | reaper.finish(self.held))
        if killed:
            self.note = (self.note + "; " if self.note else "") + \
                f"killed {killed} leftover process(es)"
        if tee:
            tee.join(timeout=5)
        if self.trim is not None:
            self.trim.stop()
        code = proc.returncode
        exit_code = code if code >= 0 else 128 - code
        if outcome is None:
            outcome = "ok" if code == 0 else "failed"
        return RunResult(outcome, exit_code, started, clock.now(), note=self.note)

    def _kill(self, proc: subprocess.Popen[bytes]) -> None:
        # Ignore further signals while we clean up: a second Ctrl-C must not
        # leave the agent's tree behind.
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)
        procs.kill_tree(proc, kill_grace())

    def _start_tee(self, proc: subprocess.Popen[bytes], log_fd: int) -> threading.Thread:
        assert proc.stdout is not None
        source = proc.stdout.fileno()
        terminal = sys.stdout.fileno()

        capped = self.capped
        assert capped is not None

        def copy() -> None:
            while chunk := os.read(source, 65536):
                try:
                    capped.write(chunk)
                except OSError:
                    capped.left = 0  # a full disk stops the log, not the run
                try:
                    os.write(terminal, chunk)
                except OSError:
                    pass

        thread = threading.Thread(target=copy, daemon=True)
        thread.start()
        return thread

    # -- recording -----------------------------------------------------------

    def _read_result(self, loop: LoopDef, result: RunResult) -> None:
        """Let the preset's reader look at the start and end of the output."""
        from loopctl.agents.presets import is_agent, read_output

        try:
            # Through the descriptor this supervisor opened, never the path:
            # the agent may have put a symlink where the log was.
            head = os.pread(self.log_fd, HEAD_BYTES, 0)
            size = os.fstat(self.log_fd).st_size
            start = max(size - TAIL_BYTES, 0)
            tail = os.pread(self.log_fd, size - start, start)
        except OSError:
            return
        reading = read_output(loop, head, tail, result.exit_code)
        self.dropped += reading.notes
        for note in reading.notes:
            self._add_note(result, note)
        result.result_text = reading.result_text
        result.session_id = reading.session_id
        result.cost_usd = reading.cost_usd
        result.track_progress = is_agent(loop)
        if result.outcome not in ("ok", "failed"):
            return
        if reading.rate_limited:
            result.outcome, result.reset_at = "deferred", reading.reset_at
            self._add_note(result, "usage limit: " + (reading.error or "rate limited")[:200])
        elif reading.is_error and result.outcome == "ok":
            result.outcome = "failed"
            self._add_note(result, "the agent reported an error: " + (reading.error or "")[:200])

    @staticmethod
    def _add_note(result: RunResult, note: str) -> None:
        result.note = f"{result.note}; {note}" if result.note else note

    def _read_decision(self, result: RunResult) -> None:
        """The agent's decision file is untrusted: bounded, checked field by field."""
        from loopctl.domain.untrusted import MAX_DECISION_BYTES, decision_from_text, read_decision

        try:
            # O_NONBLOCK: a FIFO planted there must not hang this supervisor.
            fd = os.open(self.decision_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            # No file (a symlink planted by the agent is not followed): the
            # final message may carry the decision instead.
            result.decision, notes = decision_from_text(result.result_text)
            self.dropped += notes
            for note in notes:
                self._add_note(result, note)
            return
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                kind = "Is a directory" if stat.S_ISDIR(mode) else "not a regular file"
                self._add_note(result, f"decision file unreadable: {kind}")
                return
            with os.fdopen(fd, "rb", closefd=False) as handle:
                data = handle.read(MAX_DECISION_BYTES + 1)
        except OSError as exc:
            self._add_note(result, f"decision file unreadable: {exc.strerror}")
            return
        finally:
            os.close(fd)
        result.decision, notes = read_decision(data)
        self.dropped += notes
        for note in notes:
            self._add_note(result, note)

    def _settle(self, loop: LoopDef, run: dict[str, Any], argv: list[str],
                result: RunResult) -> dict[str, Any]:
        record = {
            "version": 1, "run_id": self.run_id, "loop": self.name,
            "iteration": run["iteration"], "trigger": run.get("trigger"),
            "due_at": iso(run["due_at"]), "started_at": iso(result.started_at),
            "ended_at": iso(result.ended_at),
            "duration_s": round(result.ended_at - result.started_at, 3),
            "exit_code": result.exit_code, "outcome": result.outcome,
            "missed": run.get("missed", 0), "decision": result.decision,
            "session_id": result.session_id, "cost_usd": result.cost_usd,
            "result": result.result_text[-2000:] if result.result_text else None,
            "log": str(self.log_path), "argv": argv, "note": result.note,
            "log_truncated": self.log_truncated,
        }
        if self.handoff is not None:
            record.update(self.handoff.record())
        for attempt in range(SAVE_ATTEMPTS):
            try:
                self._save(loop, run, result, record)
                break
            except LoopctlError as exc:
                if attempt + 1 < SAVE_ATTEMPTS:
                    time.sleep(2 ** attempt)
                    continue
                self._mark_unsaved(exc.message)
                raise
        return record

    def _save(self, loop: LoopDef, run: dict[str, Any], result: RunResult,
              record: dict[str, Any]) -> set[str]:
        """Record the run and settle the loop, under the store lock."""
        pending: events.Pending = []
        with self.store.lock():
            state = self.store.read_state()
            st = state["loops"].get(self.name)
            if st and st.get("run") and st["run"]["run_id"] == self.run_id:
                before = events.status_key(st)
                now = clock.now()
                extra = settle(loop, st, result, now)
                if extra.get("note"):
                    self._add_note(result, extra.pop("note"))
                    record["note"] = result.note
                record.update(extra)
                record["status_after"] = st["status"]
                if self.dropped:
                    st["note"] = f"run {self.run_id}: {'; '.join(self.dropped)}"[:2000]
                self.store.write_json(self.paths.run_record(self.name, self.run_id), record)
                remember(self.paths, self.name, self.run_id)
                receivers = {"hook": run.get("hook"), "notify": run.get("notify") or []}
                if events.needs_attention(before, events.status_key(st)):
                    event = events.attention(loop, st, self.run_id, str(self.log_path), now)
                    pending.append((event, receivers))
                if self.handoff is not None:
                    st["last_handoff"] = events.handoff_summary(self.handoff.record())
                    failed = events.handoff_event(loop, st, self.run_id, str(self.log_path),
                                                  now, self.handoff)
                    if failed:
                        pending.append((failed, receivers))
                events.publish(self.store, pending)
                self.store.write_state(state)
            elif st is not None:
                # Recorded lost meanwhile: keep what really happened. A loop
                # removed meanwhile (`rm`) gets no run files back.
                self.store.write_json(self.paths.run_record(self.name, self.run_id), record)
                remember(self.paths, self.name, self.run_id)
            in_flight = {st["run"]["run_id"]} if st and st.get("run") else set()
            if st is not None:
                prune(self.paths, self.name, loop.keep_runs, in_flight)
        events.dispatch(self.store, pending)
        return in_flight

    def _mark_unsaved(self, message: str) -> None:
        """Leave a marker the next driver finds: this loop's state could not be
        saved, so it must pause (`error`) rather than keep firing. An empty
        file needs no free blocks, so it usually lands even on a full disk."""
        try:
            fd = os.open(self.paths.unsaved_marker(self.name, self.run_id),
                         os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
            try:
                os.write(fd, message.encode()[:500])
            except OSError:
                pass
            os.close(fd)
        except OSError:
            pass

    def _end_bounds(self, log_fd: int) -> None:
        """The log's last line says it was cut; the decision folder goes."""
        import shutil

        cap = self.trim or self.capped
        self.log_truncated = bool(cap and cap.truncated)
        if self.trim is not None and self.trim.error:
            self.preamble.append(f"# loopctl: log bound not kept: {self.trim.error}")
        if cap is not None and cap.truncated:
            self.preamble.append(note_line(cap.limit))
        self._flush_preamble(log_fd)
        if self.launched:  # rmtree does not follow symlinks the agent left in its folder
            shutil.rmtree(self.decision_path.parent, ignore_errors=True)

    def _flush_preamble(self, log_fd: int) -> None:
        """After the agent: its last line ended, then the lines held back.
        A second call finds the log ending in a newline and nothing held."""
        lines, self.preamble = self.preamble, []
        try:
            size = os.fstat(log_fd).st_size
            if size and os.pread(log_fd, 1, size - 1) != b"\n":
                os.write(log_fd, b"\n")  # readers skip only whole `# loopctl:` lines
            for line in lines:
                self._write_line(log_fd, line)
        except OSError:
            pass  # a full disk: the run record still says how it started

    @staticmethod
    def _write_line(fd: int, line: str) -> None:
        os.write(fd, (line + "\n").encode(errors="replace"))


def one_line(argv: list[str], width: int = 160) -> str:
    """argv for the log header: one line (readers skip it), long args cut."""
    shown = [a if len(a) <= width else a[: width - 3] + "..." for a in argv]
    return shlex.join(shown).replace("\r", "\\r").replace("\n", "\\n")


def exit_code_for(record: dict[str, Any]) -> int:
    return EXIT_FOR_OUTCOME.get(record.get("outcome", "failed"), 1)


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
