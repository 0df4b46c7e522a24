"""`pause`, `resume`, `stop` and `rm`."""

from __future__ import annotations

import os

from loopctl import clock
from loopctl.commands.common import locked_loop
from loopctl.domain import accounts, verbs
from loopctl.domain.errors import BusyError, LoopctlError, NoSuchLoop
from loopctl.domain.model import LoopDef
from loopctl.domain.names import is_loop_name
from loopctl.domain.result import Result
from loopctl.domain.state import LoopState, display_status, entries_of
from loopctl.engine.store_wake import tell_others
from loopctl.fast.data_class import record
from loopctl.storage.store import Store

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

@record(frozen=True)
class Controlled(Result):
    """`pause`, `resume`, `stop`: what was done, and where the loop stands."""

    loop: str
    message: str
    status: str
    reason: str | None


@record(frozen=True)
class Removed(Result):
    """`rm`: `kept_branches` hold commits no remote has (the user's work)."""

    loop: str
    removed: bool
    kept_branches: list[str]


def control(store: Store, name: str, verb: str, kill: bool = False,
            answer: str | None = None) -> Controlled:
    """pause / resume / stop. `answer`: with resume, a person's answer to
    the question of the agent that blocked the loop, for its next run."""
    with locked_loop(store, name) as (defs, state, loop, now):
        st = entries_of(state)[name]
        text = None if answer is None else _answer(name, st, verb, answer)
        if verb == "pause":
            message = st.pause(now)
        elif verb == "stop":
            message = st.stop(now)
            if kill and st.run:
                message = _kill_run(store, name, st.run)
        else:
            message = verbs.resume(loop, st, now, zone=clock.zone_of(loop))
            if text is not None:
                from loopctl.storage.triggers import keep_text

                keep_text(store, name, "answer", text)
                message += "; its next run gets your answer"
            if state.get("accounts"):
                # The user says the account is fixed: this loop finds out
                # (also one left active, its fires run by its fallback).
                state["accounts"] = accounts.clean_table(state["accounts"])
                accounts.probe(state["accounts"], name)
        state["defs_sig"] = defs.signature
        store.write_state(state)
    tell_others(store, name)  # the team's daemons act on it within a second (DESIGN §21)
    return Controlled(loop=name, message=message, status=display_status(st),
                      reason=st.reason)


def _kill_run(store: Store, name: str, run: dict[str, Any]) -> str:
    """Signal this machine's supervisor, or ask another machine's through
    the team store (DESIGN §21); what was done."""
    from loopctl.engine.team_state import ask_to_kill

    asked = ask_to_kill(store, name, run)
    if asked is not None:
        return f"stopping: {asked}"
    from loopctl.engine.firing import signal_supervisor

    signal_supervisor(run)
    return "stopping: the current run is being killed"


def _answer(name: str, st: LoopState, verb: str, answer: str) -> str:
    """The answer as the next fire keeps it (storage/triggers.py, carried as
    data), or a UsageError: only a loop its agent blocked has a question."""
    from loopctl.domain.errors import UsageError
    from loopctl.domain.gates import check_payload

    text = check_payload(answer.encode("utf-8", "surrogateescape"), "--answer")
    if verb != "resume" or st.status != "paused" or st.reason != "blocked":
        raise UsageError(f"{name} is not blocked by its agent: there is no question to answer "
                         f"(`loopctl status {name}`)")
    return text


def remove(store: Store, name: str, keep_logs: bool = False) -> Removed:
    with store.lock():
        defs = store.read_defs()
        state = store.read_state()
        if not defs.has(name) and name not in state["loops"]:
            raise NoSuchLoop(name)
        st = entries_of(state).get(name)
        from loopctl.engine.team_state import alive_for

        if st and st.run and alive_for(store, state)(st.run.get("supervisor")):
            raise BusyError(f"loop {name!r} has a run in flight; "
                            f"`loopctl stop --kill {name}` first")
        loop = defs.loops.get(name)
        defs.remove(name)
        state["loops"].pop(name, None)
        if (shared := store.shared()) is not None:  # its pending payload and answer too
            from loopctl.storage.pg.texts import drop

            drop(shared, name)
        store.write_defs(defs)
        state["defs_sig"] = defs.signature
        store.write_state(state)
    # A hand-edited entry under a name like `../x` has no run folder: no path
    # is ever derived from a name `start` would refuse.
    if not keep_logs and is_loop_name(name):
        store.remove_runs(name)
    if is_loop_name(name):  # a loop started again under this name starts without them
        from loopctl.storage.notes import clear_notes

        clear_notes(store.paths, name)
    kept = _remove_workspace(store, loop) if loop and loop.worktree else []
    tell_others(store, name)
    return Removed(loop=name, removed=True, kept_branches=kept)


def _remove_workspace(store: Store, loop: LoopDef) -> list[str]:
    """The loop's worktree goes; its branches go unless they hold commits no
    remote has (those are the user's work, and `rm` says so)."""
    from loopctl.integrations import worktree
    from loopctl.integrations.git import git

    try:
        repo, _ = worktree.repository(os.path.expanduser(loop.cwd))
    except LoopctlError:
        return []
    # Only the loop's own worktree, by the path loopctl gave it: no prune.
    worktree.discard(repo, store.paths.state_dir / "worktrees" / loop.name)
    kept = []
    for branch in worktree.loop_branches(repo, loop.branch_prefix, loop.name):
        if worktree.unpushed(repo, branch):
            kept.append(branch)
        else:
            git(repo, "branch", "--quiet", "-D", "--end-of-options", branch, check=False)
    return kept
