"""`doctor`: health checks, each finding {level: ok|warn|error, check, message}."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from loopctl import clock
from loopctl.commands.bounds import doctor_bounds
from loopctl.commands.doctor_drivers import check_drivers
from loopctl.domain import lifecycle
from loopctl.domain.durations import format_rough
from loopctl.domain.errors import LoopctlError
from loopctl.domain.model import LoopDef
from loopctl.domain.result import Notifying
from loopctl.domain.state import TERMINAL, LoopState, entries_of
from loopctl.domain.untrusted import line
from loopctl.engine import procs
from loopctl.fast.data_class import record
from loopctl.storage.definitions import Definitions
from loopctl.storage.store import Store

OVERDUE_AFTER = 120.0
EXPIRY_WARNING = 86400.0

Add = Callable[[str, str, str], None]


@record(frozen=True)
class Report(Notifying):
    """Healthy unless a finding is an error. `notified`: the delivery of each
    target told of the problems (`--notify`), else None, and then not in the
    JSON."""

    healthy: bool
    findings: list[dict[str, str]]
    notified: list[dict[str, Any]] | None = None


    def errors(self) -> list[str]:
        """`check: message` of each error, as a notification says them."""
        return [f"{f['check']}: {f['message']}" for f in self.findings if f["level"] == "error"]


def doctor(store: Store) -> Report:
    """Health checks; each finding is {level: ok|warn|error, check, message}."""
    now = clock.now()
    findings: list[dict[str, str]] = []

    def add(level: str, check: str, message: str) -> None:
        findings.append({"level": level, "check": check, "message": message})

    try:
        defs = store.read_defs()
        state = store.read_state()
    except LoopctlError as exc:
        add("error", "files", exc.message)
        return Report(healthy=False, findings=findings)
    add("ok", "files", _files_said(store))
    doctor_bounds(store, defs, add)
    from loopctl.engine.containment.sandbox import doctor_findings

    for level, check, message in doctor_findings(defs.loops, defs.top.get("sandbox")):
        add(level, check, message)
    lifecycle.reconcile(defs.loops, defs.invalid, state, now, clock.zone_of)
    for name, error in defs.invalid.items():
        add("error", "definitions", f"loop {name!r} is invalid and will not fire: {error}")
    for name, bad in store.repairs.items():
        add("error", "state", f"loop {name!r}: {store.paths.state_file} had bad values "
            f"({', '.join(bad[:5])}); they are reset and the loop is paused")
    holder = _lease_holder(store, now, add)
    _daemon_cannot_write(store, add)  # its heartbeat may have failed too
    daemon = holder is not None and holder.role == "daemon"
    for name, st in entries_of(state).items():
        loop = defs.loops.get(name)
        if loop is not None:
            _check_loop(store, defs, loop, st, now, add, live=holder is not None,
                        daemon=daemon)
    active = [defs.loops[n] for n, st in entries_of(state).items()
              if n in defs.loops and st.status == "active"]
    check_drivers(store, active, holder, add)
    from loopctl.commands.doctor_env import check_handoffs
    from loopctl.storage.paths import home_env

    check_handoffs(defs.loops.values(), home_env(), add)
    from loopctl.engine.team_state import alive_for

    # Another machine's run is alive by its claim in the team store, not by a pid here.
    _check_capacity(defs, state, now, add, alive_for(store, state))
    _doctor_worktrees(store, defs, state, add)
    from loopctl.domain.accounts import clean_table
    from loopctl.domain.accounts import findings as account_findings

    for level, message in account_findings(clean_table(state.get("accounts")), now,
                                           state["loops"]):
        add(level, "accounts", message)
    _doctor_home_key(store, add)
    _check_permissions(store, add)
    healthy = not any(f["level"] == "error" for f in findings)
    return Report(healthy=healthy, findings=findings)


def _lease_holder(store: Store, now: float, add: Add) -> Any:
    """The driver holding a live lease now, or None."""
    from loopctl.storage.lease import LeaseFile, is_live

    lease = LeaseFile(store.paths, "doctor")
    holder = lease.read()
    live = holder is not None and is_live(holder, now, lease.ttl, lease.host,
                                          lambda pid, ct: procs.alive({"pid": pid, "ct": ct}))
    if live and holder is not None:
        add("ok", "scheduler", f"{holder.role} pid {holder.pid} holds the lease")
        return holder
    add("ok", "scheduler", "no driver holds the lease now (cron ticks hold it briefly)")
    return None


def _daemon_cannot_write(store: Store, add: Add) -> None:
    """A daemon whose passes fail keeps the lease (tick stands aside) and
    fires nothing; it says why in its note (storage/daemon_note.py)."""
    from loopctl.storage.daemon_note import read_error

    note = read_error(store.paths)
    if note is not None:
        add("error", "scheduler", f"the daemon (pid {note['pid']}) cannot write, so nothing "
            f"fires until it can (it retries on its own): {note['error']}")


def _check_loop(store: Store, defs: Definitions, loop: LoopDef, st: LoopState,
                now: float, add: Add, *, live: bool, daemon: bool) -> None:
    import shutil

    from loopctl.agents.presets import binary, install_hint

    name = loop.name
    due = st.next_due
    if st.status == "active" and not st.run and due is not None \
            and now - due > OVERDUE_AFTER and not daemon and st.queued_at is None:
        add("error", "overdue",
            f"loop {name!r} was due {format_rough(now - due)} ago and has not fired: "
            "no driver fired it (the `drivers` finding says which fix applies)")
    if st.status == "paused" and st.reason == "error" \
            and name not in store.repairs:
        add("error", "state", f"loop {name!r} is paused (error): {st.note}")
    _check_paused(store, loop, st, add)
    if st.status not in TERMINAL and 0 < st.deadline - now <= EXPIRY_WARNING:
        add("warn", "expiry", f"loop {name!r} expires in "
            f"{format_rough(st.deadline - now)}; raise it with `loopctl update "
            f"{name} --for ...`")
    if st.status in ("active", "paused") and shutil.which(binary(loop)) is None:
        # FAIL only for a loop that will run on its own: a paused or on-demand
        # one fails only when someone fires it.
        scheduled = st.status == "active" and not loop.on_demand
        when = "" if scheduled else " (it runs only when " + (
            "resumed)" if st.status == "paused" else "triggered or run)")
        add("error" if scheduled else "warn", "agents",
            f"loop {name!r} needs {binary(loop)!r}, which is not on PATH{when}"
            + ("" if loop.command else install_hint(loop.agent)))
    if st.status in ("active", "paused"):
        _check_programs(loop, add)
        _check_cwd(loop, st, add)
    if loop.every and loop.every < 60 and not live:
        add("warn", "cadence", f"loop {name!r} runs every {loop.every}s, but cron ticks "
            "only once a minute: use `loopctl daemon` for sub-minute loops")
    _check_delivery(loop, st, defs.top.get("on_attention"), add)


def _check_cwd(loop: LoopDef, st: LoopState, add: Add) -> None:
    """A working directory that is gone fails every run: an error for a loop
    that runs on its own, a warning for one that waits for a person."""
    from loopctl.commands.validation import missing_cwd

    said = missing_cwd(loop)
    if said is not None:
        scheduled = st.status == "active" and not loop.on_demand
        add("error" if scheduled else "warn", "cwd", f"loop {loop.name!r}: {said}")


def _check_paused(store: Store, loop: LoopDef, st: LoopState, add: Add) -> None:
    """A loop a limit paused waits for someone (the digest's "Needs you"):
    what stopped it, the last run's error, and the fix a refused `run` gives."""
    from loopctl.commands.views import last_reason
    from loopctl.domain.valves import pause_explained

    if st.status != "paused" or st.reason in (None, "user", "error", "rate_limited"):
        return
    if st.reason == "iteration_limit" and loop.max_runs == 1:
        add("ok", "paused", f"loop {loop.name!r} is a one-off (--max-runs 1) that ran: finished")
        return
    said = pause_explained(loop, st) or f"paused ({st.reason})"
    why = last_reason(store, loop.name, st) if st.reason == "failure_limit" else None
    add("warn", "paused", f"loop {loop.name!r} is {said}"
        + (f" (last error: {line(why)})" if why else ""))


def _files_said(store: Store) -> str:
    """Only files that exist are said to be readable."""
    there = [str(p) for p in (store.paths.loops_file, store.paths.state_file) if p.exists()]
    if not there:
        return f"no {store.paths.loops_file} yet (`loopctl start` writes it)"
    if len(there) == 1:
        return f"{there[0]} is readable (no state yet: no driver has run)"
    return f"{there[0]} and {there[1]} are readable"


def _check_capacity(defs: Definitions, state: dict[str, Any], now: float, add: Add,
                    alive: Any) -> None:
    """The caps in force, what is in flight, and what waits for a slot."""
    from loopctl.domain import capacity

    caps = capacity.caps_of(defs.top)
    busy = capacity.in_flight(state["loops"], defs.loops, alive)
    queued = sorted((st.queued_at, name) for name, st in entries_of(state).items()
                    if st.queued_at is not None and st.status == "active")
    text = f"{caps.describe()}; {busy[capacity.ALL]} run(s) in flight"
    if not queued:
        add("ok", "capacity", text + ", none queued")
        return
    waited = now - queued[0][0]
    names = ", ".join(repr(n) for _, n in queued[:5]) + (" ..." if len(queued) > 5 else "")
    add("warn" if waited > OVERDUE_AFTER else "ok", "capacity",
        f"{text}; {len(queued)} queued for a slot ({names}), the oldest for "
        f"{format_rough(waited)}: raise max_concurrent in loops.yaml to run more at once")


def _check_programs(loop: LoopDef, add: Add) -> None:
    """A check or gate that cannot start fails every run (DESIGN §16, §17)."""
    for program, what in unfound_programs(loop.env, ((loop.check, "check"),
                                                     (loop.gate, "gate (--if)"))):
        add("error", "agents", f"loop {loop.name!r}: its {what} needs "
            f"{line(program)[:100]!r}, which is not on PATH")


def unfound_programs(env: Mapping[str, Any], commands: Iterable[tuple[Sequence[str] | None, str]]
                     ) -> list[tuple[str, str]]:
    """(program, what) of each command whose program is not on PATH: bare
    names only, and none when the loop's env sets its own PATH (`doctor`,
    and the warning of `start` and `update`)."""
    import shutil

    if "PATH" in env:
        return []
    return [(argv[0], what) for argv, what in commands
            if argv and "/" not in argv[0] and shutil.which(argv[0]) is None]


def _check_delivery(loop: LoopDef, st: LoopState, shared_hook: Any, add: Add) -> None:
    name = loop.name
    hook = loop.on_attention or shared_hook
    if isinstance(hook, str) and not (os.path.isfile(hook) and os.access(hook, os.X_OK)):
        add("error", "hooks", f"loop {name!r}: hook {hook} is not an executable file")
    if st.hook_error:
        add("warn", "hooks", f"loop {name!r}: last hook error: "
            f"{st.hook_error['message']}")
    if st.notify_error:
        add("warn", "notify", f"loop {name!r}: last notification failed: "
            f"{st.notify_error['message']}")
    handoff = st.last_handoff or {}
    if handoff.get("handoff_error"):
        # `digest` lists it under "Needs you": the run's work sits on a branch.
        add("error", "handoff", f"loop {name!r}: the last hand-off failed "
            f"({handoff['handoff_error']}); its work is on branch {handoff.get('branch')}: "
            "push it by hand once the remote is fixed")


def _check_permissions(store: Store, add: Add) -> None:
    import stat

    for path in (store.paths.loops_file, store.paths.state_file, store.paths.state_dir,
                 store.paths.config_dir):
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except FileNotFoundError:
            continue
        if mode & 0o077:
            add("warn", "permissions", f"{path} is mode {mode:o}; expected private "
                f"({'700' if path.is_dir() else '600'}): chmod go-rwx {path}")


def _doctor_home_key(store: Store, add: Add) -> None:
    """A key loopctl will not use (another's, readable by others, a link)
    leaves every derived file untrusted: safe, but every read parses YAML."""
    from loopctl.storage import home_key

    path = store.paths.state_dir / home_key.NAME
    if os.path.lexists(path) and home_key.load(store.paths.state_dir) is None:
        add("warn", "home key", f"{path} is not a private {home_key.KEY_BYTES}-byte file of "
            "yours, so no derived file is trusted (every read parses loops.yaml): remove "
            "it and loopctl makes a new one")


def _doctor_worktrees(store: Store, defs: Definitions, state: dict[str, Any],
                      add: Add) -> None:
    """Worktrees no run in flight owns (a killed supervisor's, before a
    driver noticed), and run branches piling up in the repositories."""
    from loopctl.integrations import worktree

    folder = store.paths.state_dir / "worktrees"
    owned = {name for name, st in entries_of(state).items() if st.run}
    if folder.is_dir():
        for stray in sorted(p.name for p in folder.iterdir() if p.name not in owned):
            add("warn", "worktrees", f"stray worktree {folder / stray}: no run owns it; the "
                "next driver pass or `loopctl rm` removes it")
    for name, loop in defs.loops.items():
        if not loop.worktree:
            continue
        try:
            repo, _ = worktree.repository(os.path.expanduser(loop.cwd))
            branches = worktree.loop_branches(repo, loop.branch_prefix, name)
        except LoopctlError as exc:
            add("error", "worktrees", f"loop {name!r}: {exc.message}")
            continue
        if branches:
            add("warn" if len(branches) > 10 else "ok", "worktrees",
                f"loop {name!r}: {len(branches)} {loop.branch_prefix}{name}/ branch(es) in "
                f"{repo}")
