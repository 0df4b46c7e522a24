"""`start` and `update`: add a loop, change its policy (never its objective)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loopctl import clock
from loopctl.commands.common import raw_entry
from loopctl.commands.loop_view import LoopObject
from loopctl.commands.views import describe
from loopctl.domain import lifecycle, setting_rules
from loopctl.domain.checks import check_name
from loopctl.domain.errors import UsageError
from loopctl.domain.loop_raw import to_raw
from loopctl.domain.model import KEYS, LoopDef, parse_loop
from loopctl.domain.setting_rules import given_by_options, option_name
from loopctl.domain.state import TERMINAL, LoopState, entries_of, new_loop_state
from loopctl.domain.timestamps import iso
from loopctl.engine.store_wake import tell_others
from loopctl.fast.data_class import replace
from loopctl.storage.store import Store


def slug(prompt: str) -> str:
    words = re.findall(r"[a-z0-9]+", prompt.lower())[:5]
    return "-".join(words)[:40].strip("-") or "loop"


def _program_words(loop: LoopDef) -> str:
    """A command loop without a prompt is named after its program: `make test`."""
    argv = list(loop.command or ())
    return " ".join([Path(argv[0]).name, *argv[1:]]) if argv else ""


def unique_name(base: str, taken: set[str]) -> str:
    if base not in taken:
        return base
    n = 2
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


def start(store: Store, raw: dict[str, Any], name: str | None) -> LoopObject:
    """Validate and add a loop; both files are written under one lock."""
    now = clock.now()
    raw = dict(raw, created_at=iso(now))
    if name is not None:
        check_name(name)
    probe = _probe(name or "probe", raw)  # validate before touching any file
    repository = _repository(probe)  # read before the lock: it reads the user's folder
    with store.lock():
        defs = store.read_defs()
        state = store.read_state()
        if name is None:
            name = unique_name(slug(probe.prompt or Path(probe.prompt_file or "").stem
                                    or _program_words(probe)),
                               set(defs.names) | set(state["loops"]))
        elif defs.has(name):
            raise UsageError(_taken(name, state["loops"].get(name)))
        loop = replace(probe, name=name)
        fresh = new_loop_state(loop, now, zone=clock.zone_of(loop))
        fresh.repository = repository
        state["loops"][name] = fresh
        store.add_loop(defs, name, to_raw(loop), loop)
        state["defs_sig"] = defs.signature
        store.write_state(state)
    tell_others(store, name)  # the team's daemons act on it within a second (DESIGN §21)
    return describe(loop, state["loops"][name], now)


def _repository(loop: LoopDef) -> list[str]:
    """The repository a confined run of the loop may read (DESIGN §14),
    found now, before any agent ran there, and kept: never looked up in the
    agent's folder again. A `.git` that is a link, a FIFO or names the home
    gives none."""
    import os

    from loopctl.engine.repo_record import find
    from loopctl.storage.safe_open import Refused

    try:
        return list(find(os.path.expanduser(loop.cwd),
                         os.path.realpath(os.path.expanduser("~"))))
    except (Refused, OSError):
        return []


def _probe(name: str, raw: dict[str, Any]) -> LoopDef:
    """`parse_loop` of what `start` was given, its errors in `start`'s words:
    the loop does not exist yet (no `loop 'probe': `), and each key is the
    option that gave it."""
    try:
        return parse_loop(name, raw, option_name)
    except UsageError as exc:
        message = exc.message.removeprefix(f"loop {name!r}: ")
        raise UsageError(in_options(message, KEYS)) from None


def changed_entry(current: Mapping[str, object], changes: dict[str, Any]) -> dict[str, object]:
    """The loop's entry with `changes` made (None: the key removed): a key
    given replaces those its row's rules say it excludes (`--every` a cron
    schedule and its `tz`, `--on-demand` every time schedule). Two such keys
    given at once both stay, for parse_loop to refuse in the options' words."""
    given = {key for key, value in changes.items() if value is not None and value is not False}
    raw = {key: value for key, value in current.items()
           if key not in setting_rules.displaced(given)}
    for key, value in changes.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    return raw


def _parse_changed(name: str, raw: dict[str, Any], changed: Any) -> LoopDef:
    """`parse_loop` of a loop `update` changed: the keys it was given named
    by their options, the others (from loops.yaml) by themselves; an error
    about what was given is `start`'s, one about the file names the loop."""
    try:
        return parse_loop(name, raw, given_by_options(changed))
    except UsageError as exc:
        where = f"loop {name!r}: "  # a loop may be named like a key: left as it is
        rest = in_options(exc.message.removeprefix(where), changed)
        if exc.message.startswith(where) and not any(
                option_name(key) in rest for key in changed):
            rest = where + rest
        raise UsageError(rest) from None


def in_options(message: str, keys: Any) -> str:
    """A message of a rule not yet told how to name a key (`named`), its
    `'key'` (or `'key: true'`) written as the option when the command line
    gave that key."""
    def option(match: re.Match[str]) -> str:
        key = match.group(1)
        return option_name(key) if key in keys and key in KEYS else match.group(0)

    return re.sub(r"'([a-z_]+)(?:: true)?'", option, message)


def _taken(name: str, st: LoopState | None) -> str:
    """Why `start --name NAME` refuses, with the fix that applies: a loop that
    ended for good cannot be updated back to life."""
    if st is not None and st.status in TERMINAL:
        return (f"a loop named {name!r} already exists and is {st.status}; remove it with "
                f"`loopctl rm {name}` first, or pick another --name")
    return (f"a loop named {name!r} already exists; pick another --name or change it with "
            f"`loopctl update {name}`")


def update(store: Store, name: str, changes: dict[str, Any]) -> LoopObject:
    """Change policy, never the objective; limits are absolute values."""
    now = clock.now()
    with store.lock():
        defs = store.read_defs()
        state = store.read_state()
        current = raw_entry(defs, name)
        loop = _parse_changed(name, changed_entry(current, changes), changes)
        defs.raw_loops[name] = to_raw(loop)
        st = entries_of(state).get(name)
        if st is not None and st.run:
            from loopctl.engine.accounts import spec_for

            st.run["spec"] = spec_for(loop, st.run)
        store.write_defs(defs)
        lifecycle.reconcile(defs.loops | {name: loop}, {}, state, now, clock.zone_of,
                            shared=store.shared() is not None)
        state["defs_sig"] = defs.signature
        store.write_state(state)
    tell_others(store, name)
    return describe(loop, state["loops"][name], now)
