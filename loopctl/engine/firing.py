"""Driver passes: what `tick`, `daemon` and `run` share (DESIGN §5).

One pass, under the store lock: read definitions and state, reconcile, let
`lifecycle.plan` decide, then launch a supervisor for every claimed run and
record its pid before the lock is released, so no other driver can see a
claim whose owner is unknown.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

from loopctl import clock
from loopctl.domain import lifecycle
from loopctl.domain.capacity import caps_of
from loopctl.domain.errors import BusyError, LoopctlError
from loopctl.domain.run_record import RunRecord
from loopctl.domain.state import TERMINAL, entries_of, in_flight, wake_time
from loopctl.domain.timestamps import iso
from loopctl.engine import events, procs
from loopctl.engine.accounts import gate_for, spec_for
from loopctl.engine.team_claims import claim_fires, team_set
from loopctl.engine.team_state import alive_for, ask_to_kill, local_machine, shared_entries
from loopctl.fast.data_class import factory, record
from loopctl.settings import knob
from loopctl.storage.definitions import Definitions
from loopctl.storage.paths import file_signature
from loopctl.storage.store import Store

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

    from loopctl.storage.lease import LeaseFile

# How a pass starts a supervisor: (store, loop, run id, a --command loop) -> its pid.
Spawn = Callable[[Store, str, str, bool], int]


@record
class PassReport:
    fired: list[dict[str, Any]] = factory(list)
    skipped: list[dict[str, str]] = factory(list)
    lost: list[str] = factory(list)
    deferred: list[dict[str, Any]] = factory(list)
    queued: list[dict[str, Any]] = factory(list)
    children: list[int] = factory(list)
    wake_at: float | None = None
    busy: bool = False
    # loops.yaml's and state.json's signatures as this pass left them, taken
    # under its lock: a write by anyone after it (a run settling) differs.
    signatures: tuple[Any, Any] | None = None
    invalid: dict[str, str] = factory(dict)
    # The driver's lease was no longer its own under the store lock: nothing
    # was read, claimed or written.
    lease_lost: bool = False


def spawn_supervisor(store: Store, loop: str, run_id: str, command_loop: bool = True) -> int:
    """Start a detached supervisor (a session of its own) and return its pid.

    It is forked from this driver, which has already imported everything a
    supervisor needs: a fresh `python -m loopctl.engine.supervisor` costs ~65 ms of
    CPU per run in start-up and imports (bench/README.md). Its stdout and
    stderr go to the run's log, so even a crash leaves its reason where the
    user looks. The store lock this driver holds is closed in the child
    (loopctl.storage.locks), so the supervisor waits for it like anyone else."""
    from loopctl.engine.supervisor import Supervisor, exit_code_for, preload
    from loopctl.storage.runs import open_log  # before forking

    preload(command_loop)
    store.run_dir(loop)
    fd = open_log(store.paths.run_log(loop, run_id))
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        os.close(fd)
        return pid
    code = 1
    try:
        forget_daemon_signals()
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(null)
        os.close(fd)
        code = exit_code_for(Supervisor(store.sibling(), loop, run_id,
                                        foreground=False).run())
    except BaseException as exc:  # the child must never return
        try:
            os.write(2, f"loopctl supervisor: {type(exc).__name__}: {exc}\n".encode())
        except OSError:
            pass
    finally:
        os._exit(code)


def start_supervisor(store: Store, loop: str, run_id: str) -> int:
    """Start a detached supervisor as a fresh interpreter and return its pid:
    for a threaded parent (`loopctl serve`), where forking would copy other
    threads' locks mid-use. The child is reaped by a thread, never a zombie;
    its output goes to the run's log as `spawn_supervisor`'s does."""
    import subprocess
    import threading

    from loopctl.storage.runs import open_log

    store.run_dir(loop)
    fd = open_log(store.paths.run_log(loop, run_id))
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "loopctl.engine.supervisor", loop, run_id],
            stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, start_new_session=True,
            close_fds=True, env=dict(os.environ))
    finally:
        os.close(fd)
    threading.Thread(target=child.wait, daemon=True).start()
    return child.pid


def forget_daemon_signals() -> None:
    """A daemon's wake-up on its children's exit is its own (engine/daemon)."""
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    except ValueError:  # not the main thread: nothing was set up here
        pass


def wait_for_children(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def reap_children(pids: list[int]) -> tuple[list[int], bool]:
    """Collect the supervisors that have exited; return those still running,
    and whether one was killed by a signal (it left its run unsettled)."""
    running, killed = [], False
    for pid in pids:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        if done == 0:
            running.append(pid)
        elif os.WIFSIGNALED(status):
            killed = True
    return running, killed


def record_lost(store: Store, loop: str, run: dict[str, Any], now: float,
                why: str | None = None) -> RunRecord:
    """Write the record of a run whose supervisor died, unless the supervisor
    got as far as writing its own (then only the state was not settled).
    A worktree it left is removed; its branch is kept when it has commits.
    `why`: what the supervisor said stopped it (a full disk). Returns the
    run's record, to count. Another machine's run (a team store's) is
    recorded here touching nothing local (`_lost_elsewhere`)."""
    path = store.paths.run_record(loop, run["run_id"])
    elsewhere = _lost_elsewhere(store, loop, run)
    note = elsewhere or _clean_after_lost(store, loop, run, why)
    if elsewhere is None and path.exists():
        from loopctl.storage.runs import load_record, remember

        remember(store.paths, loop, run["run_id"])  # it wrote its record, not the index
        found = load_record(path, run["run_id"])
        return found or RunRecord.new(run["run_id"], loop, outcome="lost")
    written = RunRecord.new(
        run["run_id"], loop,
        iteration=run["iteration"], trigger=run.get("trigger"), slot=run.get("slot"),
        due_at=iso(run["due_at"]), started_at=iso(run.get("started_at")),
        ended_at=None, observed_at=iso(now), exit_code=None,
        outcome="lost", missed=run.get("missed", 0), decision=None,
        session_id=None, cost_usd=run.get("cost_estimate"),
        log=None if elsewhere else str(store.paths.run_log(loop, run["run_id"])), note=note,
        **({"cost_estimated": True} if run.get("cost_estimate") is not None else {}),
        **({"queued_s": run["queued_s"]} if run.get("queued_s") is not None else {}),
        **({"machine": run["machine"]} if run.get("machine") else {}),
    )
    store.write_json(path, written.to_json())
    from loopctl.storage.runs import remember

    remember(store.paths, loop, run["run_id"])
    return written


def _lost_elsewhere(store: Store, loop: str, run: dict[str, Any]) -> str | None:
    """For a run claimed in a team store: its claim marked lost (a
    supervisor that comes back cannot renew it, and its fence kills the
    agent); when it was another machine's, the note its record gets. That
    machine's pids, folders and worktree are nothing to sweep here."""
    if not run.get("machine"):
        return None
    from loopctl.engine.team_state import foreign_machine, mark_lost

    mark_lost(store, loop, run["run_id"])
    if not foreign_machine(store, run):
        return None
    return (f"machine {run['machine']} stopped renewing its claim in the team store (stale "
            f"after {knob('LOOPCTL_STORE_STALE'):g}s); its fence kills the agent there")


def _clean_after_lost(store: Store, loop: str, run: dict[str, Any], why: str | None) -> str:
    """Sweep what this machine's dead supervisor left; the record's note."""
    workspace_note = None
    agent = run.get("agent")
    # Before anything else: what the dead supervisor left must not run on
    # beside the next fire (DESIGN §14).
    from loopctl.engine.reaper import sweep_lost

    swept = sweep_lost(store.paths.state_dir, loop, run)
    from loopctl.storage.run_files import remove_decision_dir

    remove_decision_dir(store.paths.decision_dir(loop, run["run_id"]))
    if run.get("workspace") and not (agent and procs.alive(agent)):
        from loopctl.integrations.worktree import cleanup_lost

        try:
            folder = store.paths.state_dir / "worktrees" / loop
            workspace_note = cleanup_lost(run["workspace"], folder, loop, run["run_id"])
        except (LoopctlError, KeyError, TypeError) as exc:
            workspace_note = f"worktree not removed: {getattr(exc, 'message', exc)}"
    note = f"supervisor died: {why}" if why else "supervisor died"
    if swept:
        note += f"; killed {swept} process(es) it left"
    if agent and procs.alive(agent):
        note += f"; agent pid {agent['pid']} still running"
    return note + (f"; {workspace_note}" if workspace_note else "")


def settle_lost(store: Store, state: dict[str, Any], lost: list[tuple[str, dict[str, Any]]],
                now: float, alive: Any = procs.alive) -> None:
    """Record lost runs; a loop whose supervisor could not save its state
    or write at all (it said why in the run's `.fault`, reserved before the
    run so that a full disk cannot stop it, or left an `.unsaved` marker)
    pauses with reason `error`: a schedule that cannot be persisted must
    not keep running (DESIGN §4)."""
    from loopctl.storage.run_files import unsaved_reason
    from loopctl.storage.runs import count_run

    for name, run in lost:
        why = unsaved_reason(store.paths, name, run["run_id"])
        written = record_lost(store, name, run, now, why)
        st = entries_of(state).get(name)
        if st is not None:  # in the pass's state write, as a settled run is
            count_run(store.paths, name, st, written)
        if st is not None and st.orphan and not alive(st.orphan):
            st.orphan = None  # killed just now by record_lost
        if why is not None and st is not None and st.status not in TERMINAL:
            fix = "make the home writable" if "(EROFS)" in why else "free the space"
            st.status, st.reason = "paused", "error"
            st.note = f"run {run['run_id']}: {why}; {fix}, then `loopctl resume {name}`"


def take_payload(store: Store, name: str, run: dict[str, Any]) -> None:
    """A fire a trigger asked for takes its payload, under the lock that
    claimed it: a trigger after the claim waits for the next fire. Any
    fire takes a person's answer to a block (DESIGN §19)."""
    from loopctl.storage.triggers import take_answer, take_pending, take_team_texts

    shared = store.shared()
    if shared is not None:  # kept in the team store, for whichever machine fires
        take_team_texts(store, shared, name, run["run_id"], run.get("trigger") == "api")
        return
    if run.get("trigger") == "api":
        take_pending(store.paths, name, run["run_id"])
    take_answer(store.paths, name, run["run_id"])


def signal_supervisor(run: dict[str, Any]) -> bool:
    """Ask a run's supervisor to stop it (it kills the tree and records it)."""
    sup = run.get("supervisor")
    if not sup or (sup.get("machine") or run.get("machine")) not in (None, local_machine(run)):
        return False  # another machine's pid: its supervisor cannot be reached from here
    if not procs.alive(sup) or sup["pid"] < 2:  # pid 1: a container's loopctl, or init
        return False
    try:
        os.kill(sup["pid"], signal.SIGTERM)
        return True
    except OSError:
        return False


def noticed(store: Store, defs: Definitions, state: dict[str, Any],
            before: dict[str, tuple[str, str | None]],
            now: float) -> events.Pending:
    """Events for loops whose status changed in a pass (expiry, limits)."""
    pending = []
    for name, st in entries_of(state).items():
        loop = defs.loops.get(name)
        if loop is None or not events.needs_attention(before.get(name, ("", None)),
                                                      events.status_key(st)):
            continue
        event = events.attention(loop, st, st.last_run_id, None, now)
        pending.append((event, events.receivers(loop, defs.top)))
    events.publish(store, pending)
    return pending


def fireable_wake(defs: Definitions, state: dict[str, Any]) -> float | None:
    """The earliest time a loop that can fire needs a driver. Unlike the
    state's own `wake_at` (the tick fast path's conservative summary), it
    skips invalid entries, loops blocked by an orphaned agent and, while
    anything is in flight, loops queued behind a concurrency cap, whose past
    due times would otherwise keep a daemon awake: a slot frees when a run
    settles (state.json changes, a supervisor's SIGCHLD) or when the
    in-flight check finds one lost. With nothing in flight (the agent of a
    lost run, counted when the pass queued them, was killed after), they
    are due now."""
    running = in_flight(state)
    wakes = [w for name, st in entries_of(state).items()
             if name in defs.loops and not st.orphan and not st.run
             and (st.queued_at is None or not running)
             and (w := wake_time(st)) is not None]
    return min(wakes) if wakes else None


def driver_pass(store: Store, now: float, defs: Definitions | None = None,
                lease: LeaseFile | None = None, spawn: Spawn | None = None,
                minute_tick: bool = False) -> PassReport:
    """Reconcile, settle what was lost, claim and launch what is due.

    With the driver's `lease`, the pass is fenced: under the store lock it
    takes the time again (the `now` it was given may predate a pause) and
    goes on only while the lease file still names it, live at that time."""
    report = PassReport()
    with store.lock():
        if lease is not None:
            now = max(now, clock.now())
            if not lease.holds(now):
                lease.held = False
                report.lease_lost = True
                return report
        defs = defs or store.read_defs()
        state = store.read_state()
        repaired = set(store.repairs)
        changed = lifecycle.reconcile(defs.loops, defs.invalid, state, now, clock.zone_of,
                                      shared=store.shared() is not None)
        alive, entries = alive_for(store, state), shared_entries(store, state)
        # A repaired entry was just paused (`error`): announce it like a limit.
        before = {name: ("damaged", None) if name in repaired else events.status_key(st)
                  for name, st in state["loops"].items()}
        result = lifecycle.plan(defs.loops, defs.invalid, state, now, alive,
                                zones=clock.zone_of, accounts=gate_for(store, state, now),
                                caps=caps_of(defs.top), minute_tick=minute_tick)
        for name in result.held:  # the account's one event named it already
            before[name] = events.status_key(state["loops"][name])
        settle_lost(store, state, result.lost, now, alive)
        if result.fired and team_set(defs):
            result.fired, refused, skips = claim_fires(store, defs, state, result.fired, now,
                                                       entries)
            result.skipped += refused
            result.slot_skips += skips
        if result.slot_skips:
            from loopctl.storage.runs import append_skips

            append_skips(store.paths, result.slot_skips)
        pending = noticed(store, defs, state, before, now)
        report.lost.extend(run["run_id"] for _, run in result.lost)
        for name, run in result.replace:  # another machine's: asked through the store
            signal_supervisor(run) or ask_to_kill(store, name, run)
        pending += launch_fired(store, defs, state, result.fired, report, now,
                                spawn or spawn_supervisor)
        if changed or result.changed or repaired or state.get("defs_sig") != defs.signature:
            state["defs_sig"] = defs.signature
            store.write_state(state)
        report.wake_at, report.busy = fireable_wake(defs, state), in_flight(state)
        # loops.yaml's as read, not as it is now: an edit saved during the
        # pass must still look new to the daemon, or it is never read.
        report.signatures = (defs.signature, file_signature(store.paths.state_file))
    events.dispatch(store, pending)
    from loopctl.engine.team_publish import publish_pending  # DESIGN §21: the team's copies

    publish_pending(store)  # after the lock: the store may be slow or down
    report.skipped += [{"loop": n, "reason": r} for n, r in result.skipped]
    report.deferred = [{"loop": n, "reason": "rate_limited", "until": iso(t)}
                       for n, t in result.deferred]
    report.queued = [{"loop": n, "since": iso(t)} for n, t in result.queued]
    report.invalid = dict(defs.invalid)
    return report


def launch_fired(store: Store, defs: Definitions, state: dict[str, Any],
                 fired: list[tuple[str, dict[str, Any]]], report: PassReport,
                 now: float, spawn: Spawn) -> events.Pending:
    """Under the store lock: a supervisor for each fire the pass claimed,
    into `report`. A fire that cannot be launched is unclaimed (its loop
    paused, `error`) and announced; the other loops still fire. Returns the
    events to send once the lock is released."""
    pending: events.Pending = []
    for name, run in fired:
        run["spec"] = spec_for(defs.loops[name], run)
        run["sandbox_default"] = defs.top.get("sandbox")  # DESIGN §14
        run.update(events.receivers(defs.loops[name], defs.top))
        take_payload(store, name, run)
        try:
            child = spawn(store, name, run["run_id"], bool(defs.loops[name].command))
        except LoopctlError as exc:
            # This loop only (its run folder is unusable): the others fire.
            state["loops"][name].unclaim(exc.message)
            pending += noticed(store, defs, {"loops": {name: state["loops"][name]}},
                               {name: ("active", None)}, now)
            report.skipped.append({"loop": name, "reason": f"error: {exc.message}"})
            continue
        run["supervisor"] = procs.ref(child)
        report.children.append(child)
        report.fired.append({"loop": name, "run_id": run["run_id"], "slot": run.get("slot"),
                             "due_at": iso(run["due_at"]), "missed": run["missed"]})
    return pending


@record
class TickReport:
    pass_report: PassReport | None
    deferred_to: dict[str, Any] | None = None
    records: list[RunRecord] = factory(list)
    # `tick --wait`: due loops it could not start (queued behind the cap
    # while runs it did not start held the slots, or left to `left_to`, a
    # driver that took the lease meanwhile).
    still_queued: list[str] = factory(list)
    left_to: dict[str, Any] | None = None

    def exit_code(self) -> int:
        """124 when a run timed out; 1 when one failed or failed its check;
        75 when a due loop was left queued, not waited for."""
        from loopctl.domain.verify import failed_verification

        outcomes = {r.outcome for r in self.records}
        if "timeout" in outcomes:
            return 124
        if outcomes - {"ok", "skipped"}:  # a gate that found nothing to do is fine
            return 1
        if any(failed_verification(r) for r in self.records):
            return 1
        return 75 if self.still_queued else 0


def tick(store: Store, now: float, wait: bool = False) -> TickReport:
    """One pass by cron or CI: take the lease, fire what is due, release."""
    from loopctl.storage.lease import LeaseFile, describe

    lease = LeaseFile(store.paths, "tick")
    try:
        holder = lease.acquire(now)
    except BusyError as exc:
        # Another driver is mid-acquire: it will fire what is due.
        return TickReport(None, deferred_to={"role": "driver", "pid": None,
                                             "busy": exc.message})
    if holder is not None:
        return TickReport(None, deferred_to=describe(holder))
    try:
        report = driver_pass(store, now, lease=lease, minute_tick=True)
    finally:
        lease.release()
    result = TickReport(report)
    if wait:
        from loopctl.engine.tick_wait import wait_runs

        wait_runs(store, result)
    return result

