"""Which account a loop's agent draws on, from this process's environment.

The rules are in loopctl.domain.accounts; this module supplies what they
may not touch: the environment the agent would get (the driver's, then the
preset's defaults, then the loop's `env`, as engine/steps/launch.py builds
it), `$HOME`, and the home's secret key. Only the firing path uses it, and
only while some account is marked: an idle `tick` never gets here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from loopctl.domain import accounts
from loopctl.domain.model import LoopDef
from loopctl.fast.data_class import asdict, record, replace
from loopctl.fast.digests import sha256
from loopctl.storage.store import Store

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

    from loopctl.domain.state import LoopState

# Without a usable home key (storage/home_key.py) ids are still hashed, not
# kept in clear; they only stop being secret to someone who can guess keys.
_NO_KEY = sha256(b"loopctl accounts without a home key").digest()


class Ids:
    """Account ids of loops under one environment, computed once each."""

    def __init__(self, store: Store, environ: Mapping[str, str] | None = None,
                 create: bool = True) -> None:
        from loopctl.storage import home_key

        self.key = home_key.load(store.paths.state_dir, create=create) or _NO_KEY
        self.environ = os.environ if environ is None else environ
        self._seen: dict[tuple[str, str], str] = {}

    def of(self, loop: LoopDef, preset: str | None = None) -> str:
        from loopctl.agents.presets import PRESETS, env_for

        preset = preset or loop.agent or "shell"
        cache = (loop.name, preset)
        if cache not in self._seen:
            env = dict(self.environ)
            env.update(env_for(as_preset(loop, preset)))
            env.update({k: v for k, v in loop.env.items() if v is not None})
            home = env.get("HOME") or os.path.expanduser("~")
            src = accounts.source(preset, PRESETS[preset].api_key_env)
            self._seen[cache] = accounts.account_id(self.key, preset,
                                                    accounts.material(src, env, home))
        return self._seen[cache]


def as_preset(loop: LoopDef, preset: str) -> LoopDef:
    """The loop as its fallback runs it: the other preset, none of the
    first one's model, arguments or session (DESIGN §18)."""
    if preset == loop.agent:
        return loop
    return replace(loop, agent=preset, model=None, agent_args=(), continue_session=False,
                   fallback_agent=None)


class Gate:
    """What `lifecycle.plan` asks before it claims a due fire."""

    def __init__(self, table: accounts.Table, ids: Ids | None) -> None:
        self.table, self.ids = table, ids

    def check(self, loop: LoopDef, now: float) -> accounts.Verdict:
        from loopctl.domain.agent_cli import is_agent

        if not self.table or self.ids is None or not is_agent(loop):
            return accounts.Verdict()
        ids = self.ids
        return accounts.verdict(self.table, loop.name, loop.agent or "shell",
                                loop.fallback_agent,
                                lambda preset: ids.of(loop, preset), now)


def table_of(state: dict[str, Any], now: float) -> accounts.Table:
    """state.json's marks, checked, with the expired ones dropped; kept in
    `state` so what the caller changes is what gets written."""
    table = accounts.clean_table(state.get("accounts"))
    accounts.expire(table, now)
    if table or "accounts" in state:
        state["accounts"] = table
    return table


def gate_for(store: Store, state: dict[str, Any], now: float) -> Gate:
    """A gate over the marks; ids are only worked out when a mark holds."""
    table = table_of(state, now)
    return Gate(table, Ids(store) if table else None)


def spec_for(loop: LoopDef, run: dict[str, Any]) -> dict[str, object]:
    """The definition a claimed run runs, the fallback's when it has one, in its
    loops.yaml form (an open mapping: see loop_raw.to_raw)."""
    from loopctl.domain.loop_raw import to_raw

    preset = run.get("preset")
    return to_raw(as_preset(loop, preset) if preset else loop)


@record(frozen=True)
class Held:
    """A loop its account holds, as the reading commands show it: the LOOP
    object's `held` (`to_json()`), its status `held` with `kind` as the
    reason, the reset (`until`, None: a login is needed) and the fix."""

    kind: str
    until: str | None
    presets: list[str]
    fix: str
    note: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def held_view(store: Store, loops: Mapping[str, LoopDef], state: dict[str, Any],
              now: float) -> dict[str, Held]:
    """What the reading commands show of each loop its account holds
    (DESIGN §18): from the moment the account is marked, an idle loop of it
    with no free fallback is `held`, not `active`. Reads, never writes."""
    table = accounts.clean_table(state.get("accounts"))
    accounts.expire(table, now)
    if not table:
        return {}
    gate = Gate(table, Ids(store, create=False))
    out: dict[str, Held] = {}
    entries: dict[str, LoopState] = state["loops"]
    for name, st in entries.items():
        loop = loops.get(name)
        if loop is None or st.run:
            continue
        marks: list[accounts.AccountMark] = []
        if st.status == "paused" and st.reason in accounts.KINDS:
            entry = accounts.held_by(table, name, now)
            marks = [entry] if entry is not None else []
        elif st.status == "active":
            verdict = gate.check(loop, now)
            marks = [m for m in (verdict.entry, verdict.also) if m is not None]
        if marks:
            out[name] = _shown(name, st, marks)
    return out


def _shown(name: str, st: LoopState, marks: list[accounts.AccountMark]) -> Held:
    from loopctl.domain.timestamps import iso

    resets = [m.until for m in marks if m.kind == accounts.RATE_LIMITED and m.until]
    note = str(st.note or "") if st.status == "paused" and st.note \
        else "; ".join(accounts.hold_note(m) for m in marks)
    if not resets:
        note += f"; once fixed, `loopctl resume {name}`"
    auth = [m for m in marks if m.kind == accounts.AUTH_REQUIRED]
    fix = auth[0].fix if auth and not resets else \
        f"the {marks[0].preset} account is rate-limited; it resumes by itself"
    return Held(kind=accounts.RATE_LIMITED if resets else accounts.AUTH_REQUIRED,
                until=iso(min(resets)) if resets else None,
                presets=[m.preset for m in marks], fix=fix, note=note)
