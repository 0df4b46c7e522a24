"""What each command does, as functions over a Store that return plain data.

The CLI renders these results as text or `--json`; tests call them directly.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from loopctl import clock
from loopctl.domain import lifecycle, valves
from loopctl.domain.durations import format_rough, parse_duration
from loopctl.domain.errors import BusyError, LoopctlError, NoSuchLoop, NotFiring, UsageError
from loopctl.domain.model import LoopDef, check_name, parse_loop, to_raw
from loopctl.domain.plain import replace
from loopctl.domain.schedule import iso, parse_iso
from loopctl.domain.state import TERMINAL, display_status, new_loop_state
from loopctl.engine import events, procs
from loopctl.engine.events import status_key as events_key
from loopctl.integrations.notify import mask
from loopctl.storage.paths import is_loop_name
from loopctl.storage.store import Definitions, Store

JSON_VERSION = 1


# -- creating and changing loops ----------------------------------------------


def slug(prompt: str) -> str:
    words = re.findall(r"[a-z0-9]+", prompt.lower())[:5]
    return "-".join(words)[:40].strip("-") or "loop"


def unique_name(base: str, taken: set[str]) -> str:
    if base not in taken:
        return base
    n = 2
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


def start(store: Store, raw: dict[str, Any], name: str | None) -> dict[str, Any]:
    """Validate and add a loop; both files are written under one lock."""
    now = clock.now()
    raw = dict(raw, created_at=iso(now))
    if name is not None:
        check_name(name)
    probe = parse_loop(name or "probe", raw)  # validate before touching any file
    with store.lock():
        defs = store.read_defs()
        state = store.read_state()
        if name is None:
            name = unique_name(slug(probe.prompt or Path(probe.prompt_file or "").stem),
                               set(defs.names) | set(state["loops"]))
        elif defs.has(name):
            raise UsageError(f"a loop named {name!r} already exists; pick another --name "
                             "or change it with `loopctl update`")
        loop = replace(probe, name=name)
        state["loops"][name] = new_loop_state(loop, now)
        store.add_loop(defs, name, to_raw(loop), loop)
        state["defs_sig"] = defs.signature
        store.write_state(state)
    return describe(loop, state["loops"][name], now)


def update(store: Store, name: str, changes: dict[str, Any]) -> dict[str, Any]:
    """Change policy, never the objective; limits are absolute values."""
    now = clock.now()
    with store.lock():
        defs = store.read_defs()
        state = store.read_state()
        current = _raw_entry(defs, name)
        raw = dict(current)
        for key, value in changes.items():
            if value is None:
                raw.pop(key, None)
            else:
                raw[key] = value
        if "cron" in changes:
            raw.pop("every", None)
        if "every" in changes:
            raw.pop("cron", None)
            raw.pop("tz", None)
        loop = parse_loop(name, raw)
        defs.raw_loops[name] = to_raw(loop)
        st = state["loops"].get(name)
        if st is not None and st.get("run"):
            st["run"]["spec"] = defs.raw_loops[name]
        store.write_defs(defs)
        lifecycle.reconcile(defs.loops | {name: loop}, {}, state, now)
        state["defs_sig"] = defs.signature
        store.write_state(state)
    return describe(loop, state["loops"][name], now)


def _raw_entry(defs: Definitions, name: str) -> dict[str, Any]:
    if not defs.has(name):
        raise NoSuchLoop(name)
    raw = defs.raw(name)
    if name in defs.invalid or not isinstance(raw, dict):
        raise UsageError(f"loop {name!r} is invalid ({defs.invalid.get(name)}); fix it in "
                         "loops.yaml first")
    return raw


@contextmanager
def locked_loop(store: Store, name: str) -> Iterator[tuple[Definitions, dict[str, Any],
                                                           LoopDef, float]]:
    """Under the store lock: definitions, reconciled state, the loop, now.
    Unknown loop: exit 4; invalid entry: exit 2."""
    now = clock.now()
    with store.lock():
        defs = store.read_defs()
        state = store.read_state()
        lifecycle.reconcile(defs.loops, defs.invalid, state, now)
        loop = defs.loops.get(name)
        if loop is None:
            _raw_entry(defs, name)  # raises the right error
        assert loop is not None
        yield defs, state, loop, now


def control(store: Store, name: str, verb: str, kill: bool = False) -> dict[str, Any]:
    """pause / resume / stop."""
    with locked_loop(store, name) as (defs, state, loop, now):
        st = state["loops"][name]
        if verb == "pause":
            message = lifecycle.pause(st, now)
        elif verb == "stop":
            message = lifecycle.stop(st, now)
            if kill and st.get("run"):
                from loopctl.engine.firing import signal_supervisor

                signal_supervisor(st["run"])
                message = "stopping: the current run is being killed"
        else:
            message = lifecycle.resume(loop, st, now)
        state["defs_sig"] = defs.signature
        store.write_state(state)
    return {"version": JSON_VERSION, "loop": name, "message": message,
            "status": display_status(st), "reason": st.get("reason")}


def remove(store: Store, name: str, keep_logs: bool = False) -> dict[str, Any]:
    with store.lock():
        defs = store.read_defs()
        state = store.read_state()
        if not defs.has(name) and name not in state["loops"]:
            raise NoSuchLoop(name)
        st = state["loops"].get(name)
        if st and st.get("run") and procs.alive(st["run"].get("supervisor")):
            raise BusyError(f"loop {name!r} has a run in flight; "
                            f"`loopctl stop --kill {name}` first")
        loop = defs.loops.get(name)
        defs.remove(name)
        state["loops"].pop(name, None)
        store.write_defs(defs)
        state["defs_sig"] = defs.signature
        store.write_state(state)
    # A hand-edited entry under a name like `../x` has no run folder: no path
    # is ever derived from a name `start` would refuse.
    if not keep_logs and is_loop_name(name):
        store.remove_runs(name)
    kept = _remove_workspace(store, loop) if loop and loop.worktree else []
    return {"version": JSON_VERSION, "loop": name, "removed": True, "kept_branches": kept}


def _remove_workspace(store: Store, loop: LoopDef) -> list[str]:
    """The loop's worktree goes; its branches go unless they hold commits no
    remote has (those are the user's work, and `rm` says so)."""
    from loopctl.integrations import workspace

    try:
        repo, _ = workspace.repository(os.path.expanduser(loop.cwd))
    except LoopctlError:
        return []
    workspace.remove(repo, store.paths.state_dir / "worktrees" / loop.name)
    kept = []
    for branch in workspace.loop_branches(repo, loop.branch_prefix, loop.name):
        if workspace.unpushed(repo, branch):
            kept.append(branch)
        else:
            workspace.git(repo, "branch", "--quiet", "-D", branch, check=False)
    return kept


# -- reading -------------------------------------------------------------------


def describe(loop: LoopDef | None, st: dict[str, Any] | None, now: float,
             name: str | None = None, invalid: str | None = None) -> dict[str, Any]:
    """The stable JSON shape of one loop (documented in the README)."""
    name = loop.name if loop else name
    out: dict[str, Any] = {"name": name, "status": "invalid" if invalid else display_status(st)}
    if invalid:
        out["error"] = invalid
        return out
    assert loop is not None and st is not None
    out.update({
        "reason": st.get("reason"),
        "schedule": {"every_s": loop.every, "auto": loop.auto, "cron": loop.cron,
                     "tz": loop.tz, "text": loop.schedule_text()},
        "agent": loop.agent, "command": list(loop.command) if loop.command else None,
        "cwd": loop.cwd,
        "runs": {"used": st["iterations"], "limit": loop.max_runs or None},
        "failures": {"consecutive": st["failures"], "limit": loop.max_failures or None},
        "cost_usd": {"spent": st.get("cost_usd", 0.0), "budget": loop.budget_usd},
        "created_at": iso(st["created"]), "deadline": iso(st["deadline"]),
        "deadline_remaining_s": max(round(st["deadline"] - now), 0),
        "next_fire": iso(st["next_due"]) if st["status"] == "active" else None,
        "last_run": {"run_id": st.get("last_run_id"), "outcome": st.get("last_outcome"),
                     "ended_at": iso(st.get("last_end"))} if st.get("last_run_id") else None,
        "current_run": {"run_id": st["run"]["run_id"], "started_at": iso(
            st["run"].get("started_at"))} if st.get("run") else None,
        "pending_fire": bool(st.get("pending")),
        "after_run": st.get("after_run"),
        "recent_outcomes": list(st.get("outcomes", [])),
        "last_decision": st.get("last_decision"),
        "ended_at": iso(st.get("ended_at")), "observed_at": iso(st.get("observed_at")),
        "note": st.get("note"),
        "rate_limited_until": iso(st.get("resume_at")) if st.get("reason") == "rate_limited"
        else None,
        "hook_error": _delivery_error(st.get("hook_error")),
        "notify": [mask(url) for url in loop.notify],
        "workspace": {"base": loop.base, "branch_prefix": loop.branch_prefix,
                      "push": loop.push, "pr": loop.pr, "merge": loop.merge}
        if loop.worktree else None,
        "last_handoff": st.get("last_handoff"),
        "notify_error": _delivery_error(st.get("notify_error")),
    })
    return out


def _delivery_error(error: dict[str, Any] | None) -> dict[str, Any] | None:
    return {"at": iso(error["at"]), "message": error["message"]} if error else None


def masked(raw: Any) -> Any:
    """A definition as shown: notification URLs hold tokens."""
    if not isinstance(raw, dict) or raw.get("notify") is None:
        return raw
    urls = raw["notify"] if isinstance(raw["notify"], list) else [raw["notify"]]
    return dict(raw, notify=[mask(u) if isinstance(u, str) else "****" for u in urls])


def snapshot(store: Store) -> tuple[Definitions, dict[str, Any], float]:
    """Definitions and state as they are, reconciled in memory only: reading
    commands never write."""
    now = clock.now()
    defs = store.read_defs()
    state = store.read_state()
    lifecycle.reconcile(defs.loops, defs.invalid, state, now)
    return defs, state, now


def list_loops(store: Store) -> list[dict[str, Any]]:
    defs, state, now = snapshot(store)
    out = []
    for name in defs.names:
        if name in defs.invalid:
            out.append(describe(None, None, now, name=str(name), invalid=defs.invalid[name]))
        else:
            out.append(describe(defs.loops[name], state["loops"][name], now))
    return out


def list_brief(store: Store) -> list[dict[str, Any]]:
    """What the `ls` table shows, read straight from the definitions and the
    state: `describe` builds the whole JSON shape (eight timestamps turned
    into text), which at 10,000 loops costs more than reading them."""
    defs, state, now = snapshot(store)
    out: list[dict[str, Any]] = []
    for name in defs.names:
        if name in defs.invalid:
            out.append({"name": name, "status": "invalid", "error": defs.invalid[name]})
            continue
        loop, st = defs.loops[name], state["loops"][name]
        out.append({
            "name": name, "status": display_status(st), "reason": st.get("reason"),
            "schedule": loop.schedule_text(), "used": st["iterations"],
            "limit": loop.max_runs or None,
            "next_fire": st["next_due"] if st["status"] == "active" else None,
            "last_outcome": st.get("last_outcome") if st.get("last_run_id") else None,
        })
    return out


def status(store: Store, name: str) -> dict[str, Any]:
    defs, state, now = snapshot(store)
    if name in defs.invalid:
        return describe(None, None, now, name=name, invalid=defs.invalid[name])
    if name not in defs.loops:
        raise NoSuchLoop(name)
    return describe(defs.loops[name], state["loops"][name], now)


def show(store: Store, name: str) -> dict[str, Any]:
    defs = store.read_defs()
    if not defs.has(name):
        raise NoSuchLoop(name)
    return {name: defs.raw(name)}


DURATION_KEYS = ("every", "after", "min_delay", "max_delay", "keepalive", "timeout", "for")


def definition_json(raw: Any) -> Any:
    """A definition for `--json`: durations in seconds where they parse,
    notification URLs masked."""
    if not isinstance(raw, dict):
        return raw
    out = masked(raw)
    if out.get("created_at") is not None:
        try:
            out["created_at"] = iso(parse_iso(str(out["created_at"])))
        except ValueError:
            pass
    for key in DURATION_KEYS:
        value = out.get(key)
        if value is None or value == "auto":
            continue
        try:
            out[key] = parse_duration(value)
        except LoopctlError:
            pass  # an invalid entry is shown as written
    return out


def validate(store: Store, path: Path | None) -> dict[str, Any]:
    defs = store.read_defs(path)
    return {"version": JSON_VERSION, "file": str(path or store.paths.loops_file),
            "valid": sorted(defs.loops), "invalid": dict(sorted(defs.invalid.items()))}


# -- firing ----------------------------------------------------------------------


RUN_MODES = ("manual", "force", "scheduled")


def claim_now(store: Store, name: str, mode: str = "manual") -> tuple[str, bool]:
    """Claim a run of `name` now; its id, and whether it runs in a worktree.

    `manual` refuses a loop that is not active (exit 2); `force` runs it
    anyway; `scheduled` is what an external scheduler calls: it fires only
    when a due fire under `tick` would, without looking at the due time."""
    from loopctl.engine.firing import noticed, settle_lost

    pending: events.Pending = []
    try:
        with locked_loop(store, name) as (defs, state, loop, now):
            st = state["loops"][name]
            before = {n: events_key(other) for n, other in state["loops"].items()}
            result = lifecycle.plan(defs.loops, defs.invalid, state, now, procs.alive,
                                    only=name)
            settle_lost(store, state, result.lost, now)
            state["defs_sig"] = defs.signature
            busy = _busy(name, st, bool(result.fired))
            # A fire plan() has just claimed was due and within limits.
            claimed = bool(result.fired)
            refusal = None if busy or claimed or mode == "force" \
                else valves.fire_refusal(loop, st)
            pending = noticed(store, defs, state, before, now)
            if busy or refusal:
                store.write_state(state)
                if busy:
                    raise BusyError(busy)
                assert refusal is not None
                if st.get("reason") == "rate_limited":
                    raise BusyError(f"loop {name!r} is {refusal}")
                if mode == "scheduled":
                    # Not an error: a completed loop must not turn cron red nightly.
                    raise NotFiring(f"not firing {name}: it is {refusal}")
                raise UsageError(f"loop {name!r} is {refusal}; or run it anyway with "
                                 f"`loopctl run {name} --force`")
            # If `name` was due, plan() has just claimed it as a scheduled fire.
            trigger = "schedule" if mode == "scheduled" else "manual"
            run = st["run"] or lifecycle.claim(loop, st, now, trigger)
            run["spec"] = to_raw(loop)
            run.update(events.receivers(loop, defs.top))
            run["supervisor"] = procs.ref()
            store.write_state(state)
            return str(run["run_id"]), loop.worktree
    finally:
        events.dispatch(store, pending)


def _busy(name: str, st: dict[str, Any], claimed: bool) -> str | None:
    if st.get("run") and not claimed:
        return f"loop {name!r} has a run in flight ({st['run']['run_id']})"
    if st.get("orphan"):
        return f"loop {name!r}: agent pid {st['orphan']['pid']} of a lost run is still alive"
    return None


def run_now(store: Store, name: str, mode: str = "manual") -> dict[str, Any]:
    from loopctl.engine.supervisor import Supervisor

    run_id, worktree = claim_now(store, name, mode)
    return Supervisor(store, name, run_id, foreground=True, worktree=worktree).run()


def history(store: Store, name: str, limit: int) -> list[dict[str, Any]]:
    from loopctl.storage.runs import list_records, loop_folder

    defs = store.read_defs()
    if not defs.has(name) and loop_folder(store.paths, check_name(name)) is None:
        raise NoSuchLoop(name)
    records = list_records(store.paths, name)
    return records[-limit:] if limit else records


def decide(kind: str, summary: str | None, evidence: str | None,
           next_delay_s: int | None) -> dict[str, Any]:
    import json

    from loopctl.storage.store import atomic_write

    target = os.environ.get("LOOPCTL_DECISION_FILE")
    if not target:
        raise UsageError("loopctl decide only works inside a run (LOOPCTL_DECISION_FILE "
                         "is not set)")
    from loopctl.domain.untrusted import MAX_DECISION_TEXT, text

    for option, value in (("--summary", summary), ("--evidence", evidence)):
        if value is not None and text(value, MAX_DECISION_TEXT) is None:
            raise UsageError(f"bad {option}: expected UTF-8 text of at most "
                             f"{MAX_DECISION_TEXT} characters; shorten it")
    decision = {"version": 1, "decision": kind, "summary": summary, "evidence": evidence,
                "next_delay_s": next_delay_s}
    atomic_write(Path(target), json.dumps(decision).encode())
    return decision


def agents_table() -> list[dict[str, Any]]:
    """Every preset: on PATH?, version (asked with a short timeout), argv."""
    import shutil
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    from loopctl.agents.presets import PRESETS, build_argv

    def version(binary: str, args: tuple[str, ...]) -> str | None:
        if not args:
            return None
        try:
            out = subprocess.run([binary, *args], capture_output=True, text=True, timeout=5,
                                 stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            return None
        lines = (out.stdout or out.stderr).strip().splitlines()
        return lines[0][:60] if out.returncode == 0 and lines else None

    rows = []
    for preset in PRESETS.values():
        loop = parse_loop("example", {"prompt": "PROMPT", "every": "1h", "agent": preset.name})
        argv, stdin = build_argv(loop, "PROMPT", "PROMPT_FILE", "RUN_ID")
        rows.append({"preset": preset.name, "binary": preset.binary,
                     "path": shutil.which(preset.binary), "version": None, "argv": argv,
                     "prompt_on_stdin": stdin is not None,
                     "safe_default": preset.safe_default, "yolo": list(preset.bypass),
                     "warning": preset.warning, "verified": preset.verified})
    with ThreadPoolExecutor(max_workers=8) as pool:
        found = [r for r in rows if r["path"]]
        versions = pool.map(lambda r: version(r["path"], PRESETS[r["preset"]].version_args),
                            found)
        for row, ver in zip(found, versions, strict=True):
            row["version"] = ver
    return rows


OVERDUE_AFTER = 120.0
EXPIRY_WARNING = 86400.0


def doctor(store: Store) -> dict[str, Any]:
    """Health checks; each finding is {level: ok|warn|error, check, message}."""
    import shutil
    import stat

    from loopctl.agents.presets import binary
    from loopctl.storage.lease import LeaseFile, is_live

    now = clock.now()
    findings: list[dict[str, str]] = []

    def add(level: str, check: str, message: str) -> None:
        findings.append({"level": level, "check": check, "message": message})

    try:
        defs = store.read_defs()
        state = store.read_state()
    except LoopctlError as exc:
        add("error", "files", exc.message)
        return {"version": JSON_VERSION, "healthy": False, "findings": findings}
    add("ok", "files", f"{store.paths.loops_file} and {store.paths.state_file} are readable")
    from loopctl.commands.bounds import doctor_bounds

    doctor_bounds(store, defs, add)
    lifecycle.reconcile(defs.loops, defs.invalid, state, now)
    for name, error in defs.invalid.items():
        add("error", "definitions", f"loop {name!r} is invalid and will not fire: {error}")
    for name, bad in store.repairs.items():
        add("error", "state", f"loop {name!r}: {store.paths.state_file} had bad values "
            f"({', '.join(bad[:5])}); they are reset and the loop is paused")

    lease = LeaseFile(store.paths, "doctor")
    holder = lease.read()
    live = holder is not None and is_live(holder, now, lease.ttl, lease.host,
                                          lambda pid, ct: procs.alive({"pid": pid, "ct": ct}))
    if live and holder is not None:
        add("ok", "scheduler", f"{holder.role} pid {holder.pid} holds the lease")
    else:
        add("ok", "scheduler", "no driver holds the lease now (cron ticks hold it briefly)")
    for name, st in state["loops"].items():
        loop = defs.loops.get(name)
        if loop is None:
            continue
        due = st.get("next_due")
        if st["status"] == "active" and not st.get("run") and due is not None \
                and now - due > OVERDUE_AFTER and not (live and holder and
                                                      holder.role == "daemon"):
            add("error", "overdue",
                f"loop {name!r} was due {format_rough(now - due)} ago and has not fired: "
                "no scheduler is running; run `loopctl cron install` or `loopctl daemon`")
        if st["status"] == "paused" and st.get("reason") == "error" \
                and name not in store.repairs:
            add("error", "state", f"loop {name!r} is paused (error): {st.get('note')}")
        if st["status"] not in TERMINAL and 0 < st["deadline"] - now <= EXPIRY_WARNING:
            add("warn", "expiry", f"loop {name!r} expires in "
                f"{format_rough(st['deadline'] - now)}; raise it with `loopctl update "
                f"{name} --for ...`")
        if st["status"] in ("active", "paused") and shutil.which(binary(loop)) is None:
            add("error", "agents", f"loop {name!r} needs {binary(loop)!r}, which is not on PATH")
        if loop.every and loop.every < 60 and not live:
            add("warn", "cadence", f"loop {name!r} runs every {loop.every}s, but cron ticks "
                "only once a minute: use `loopctl daemon` for sub-minute loops")
        hook = loop.on_attention or defs.top.get("on_attention")
        if isinstance(hook, str) and not (os.path.isfile(hook) and os.access(hook, os.X_OK)):
            add("error", "hooks", f"loop {name!r}: hook {hook} is not an executable file")
        if st.get("hook_error"):
            add("warn", "hooks", f"loop {name!r}: last hook error: "
                f"{st['hook_error']['message']}")
        if st.get("notify_error"):
            add("warn", "notify", f"loop {name!r}: last notification failed: "
                f"{st['notify_error']['message']}")
    _doctor_worktrees(store, defs, state, add)
    for path in (store.paths.loops_file, store.paths.state_file, store.paths.state_dir,
                 store.paths.config_dir):
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except FileNotFoundError:
            continue
        if mode & 0o077:
            add("warn", "permissions", f"{path} is mode {mode:o}; expected private "
                f"({'700' if path.is_dir() else '600'}): chmod go-rwx {path}")
    healthy = not any(f["level"] == "error" for f in findings)
    return {"version": JSON_VERSION, "healthy": healthy, "findings": findings}


def _doctor_worktrees(store: Store, defs: Definitions, state: dict[str, Any],
                      add: Any) -> None:
    """Worktrees no run in flight owns (a killed supervisor's, before a
    driver noticed), and run branches piling up in the repositories."""
    from loopctl.integrations import workspace

    folder = store.paths.state_dir / "worktrees"
    owned = {name for name, st in state["loops"].items() if st.get("run")}
    if folder.is_dir():
        for stray in sorted(p.name for p in folder.iterdir() if p.name not in owned):
            add("warn", "worktrees", f"stray worktree {folder / stray}: no run owns it; the "
                "next driver pass or `loopctl rm` removes it")
    for name, loop in defs.loops.items():
        if not loop.worktree:
            continue
        try:
            repo, _ = workspace.repository(os.path.expanduser(loop.cwd))
            branches = workspace.loop_branches(repo, loop.branch_prefix, name)
        except LoopctlError as exc:
            add("error", "worktrees", f"loop {name!r}: {exc.message}")
            continue
        if branches:
            add("warn" if len(branches) > 10 else "ok", "worktrees",
                f"loop {name!r}: {len(branches)} {loop.branch_prefix}{name}/ branch(es) in "
                f"{repo}")


def read_events(store: Store, loop: str | None = None) -> list[dict[str, Any]]:
    import json

    out = []
    try:
        with open(store.paths.events_file, "rb") as handle:
            for line in handle:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if loop is None or event.get("loop") == loop:
                    out.append(event)
    except FileNotFoundError:
        pass
    return out


# -- reports and notifications -----------------------------------------------------


def digest(store: Store, since_s: int) -> dict[str, Any]:
    """What happened in the last `since_s` seconds, "needs you" first."""
    from loopctl.domain import digest as report
    from loopctl.storage.runs import list_records

    defs, state, now = snapshot(store)
    loops = list_loops(store)
    records = {name: list_records(store.paths, name) for name in defs.loops}
    return report.build(loops, records, read_events(store), now - since_s, now)


def notify_targets(store: Store, name: str | None) -> list[str]:
    """A loop's targets (with the shared ones), or every target of every loop."""
    from loopctl.integrations.notify import targets_for

    defs = store.read_defs()
    if name is not None:
        if not defs.has(name):
            raise NoSuchLoop(name)
        loop = defs.loops.get(name)
        if loop is None:
            raise UsageError(f"loop {name!r} is invalid ({defs.invalid.get(name)})")
        return targets_for(loop.notify, defs.top.get("notify"))
    urls = [u for loop in defs.loops.values() for u in loop.notify]
    return targets_for(urls, defs.top.get("notify"))


def send_notification(urls: list[str], title: str, body: str) -> list[dict[str, Any]]:
    """Send now, in this process (commands that report each result)."""
    from loopctl.integrations.notify import check_urls, send

    return send(check_urls(urls), title, body)
