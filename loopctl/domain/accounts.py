"""Accounts: loops that draw on the same credentials (DESIGN §18). Pure.

An account is a preset plus what its CLI authenticates with: the key
variables it reads and the config folder its login lives in (the table
below; checked against each CLI's `--help`, docs and binary). Two loops whose
preset and those values agree share an account, so a usage limit or a
missing login seen by one run holds them all. Values are never stored: the
account's id is an HMAC of them under the home's secret key
(storage/home_key.py), and the key comes in as an argument.

The table of marked accounts lives in state.json (`accounts`): one entry per
account that is rate-limited until a time or needs a login. This module
decides what a due fire of a loop does given that table (run, run the
fallback preset, or hold), and builds the table's entries; the engine
computes ids and carries the decisions out.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Collection, Mapping

from loopctl.domain import untrusted
from loopctl.fast.data_class import record
from loopctl.fast.digests import hmac_sha256

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

    from loopctl.domain.state import LoopState

RATE_LIMITED, AUTH_REQUIRED = "rate_limited", "auth_required"
KINDS = (RATE_LIMITED, AUTH_REQUIRED)
# A key variable in a definition longer than this, or holding a line break or
# a NUL, is refused at `start`/`update`/`validate`: no API key looks like it.
MAX_KEY_CHARS = 4096
ID_CHARS = 24  # 96 bits of the HMAC: enough to tell accounts apart
MAX_ACCOUNTS = 1000
MAX_NAMED_LOOPS = 200


@record(frozen=True)
class Source:
    """What makes a preset's account, and what to tell a human to fix it."""

    variables: tuple[str, ...]
    config_var: str | None  # the variable naming the config folder, if any
    config_default: str  # relative to $HOME when `config_var` is unset
    fix: str


SOURCES: dict[str, Source] = {
    "claude": Source(
        ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN",
         "ANTHROPIC_BASE_URL", "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX"),
        "CLAUDE_CONFIG_DIR", ".claude",
        "run `claude /login` as the user loopctl runs as, or set ANTHROPIC_API_KEY"),
    "codex": Source(
        ("OPENAI_API_KEY", "CODEX_API_KEY", "CODEX_ACCESS_TOKEN", "OPENAI_BASE_URL"),
        "CODEX_HOME", ".codex",
        "run `codex login`, or set OPENAI_API_KEY (or the env_key of the provider in "
        "~/.codex/config.toml)"),
    "gemini": Source(
        ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI",
         "GOOGLE_GENAI_USE_GCA", "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT",
         "GOOGLE_GEMINI_BASE_URL"),
        "GEMINI_CLI_HOME", ".gemini",
        "run `gemini` once and log in, or set GEMINI_API_KEY"),
    "qwen": Source(
        ("OPENAI_API_KEY", "OPENAI_BASE_URL", "DASHSCOPE_API_KEY", "QWEN_OAUTH"),
        "QWEN_HOME", ".qwen",
        "run `qwen` once and pick an auth type, or set OPENAI_API_KEY"),
    "opencode": Source(
        ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY", "GEMINI_API_KEY",
         "OPENCODE_CONFIG", "OPENCODE_CONFIG_CONTENT", "OPENCODE_AUTH_CONTENT"),
        "XDG_DATA_HOME", ".local/share",
        "run `opencode auth login`, or set the provider's API key (ANTHROPIC_API_KEY, ...)"),
}
# Presets not above: their key variable (agents/presets.py) and $HOME.
GENERIC_FIX = "log the agent in as the user loopctl runs as, or set {var}"


def source(preset: str, api_key_env: str | None = None) -> Source:
    known = SOURCES.get(preset)
    if known is not None:
        return known
    var = api_key_env or "its API key"
    variables = (api_key_env,) if api_key_env else ()
    return Source(variables, None, "", GENERIC_FIX.format(var=var))


def every_key_variable() -> frozenset[str]:
    return frozenset(v for s in SOURCES.values() for v in s.variables)


def key_value_problem(name: str, value: str) -> str | None:
    """Why a definition's value for an account variable is not a key, or None."""
    if name not in every_key_variable():
        return None
    if len(value) > MAX_KEY_CHARS:
        return (f"env {name}: {len(value)} characters; a key or token is at most "
                f"{MAX_KEY_CHARS}")
    if any(c in value for c in "\n\r\0"):
        return f"env {name}: holds a line break or NUL; a key or token is one line"
    return None


def material(src: Source, env: Mapping[str, str], home: str) -> list[list[str]]:
    """What the account is made of, in a fixed order. The config folder is
    named by its variable or found under home (`~`-relative, normalized, so
    `/home/me/.claude` and `/home/me//.claude/` agree)."""
    pairs = [[name, env[name]] for name in src.variables if env.get(name)]
    folder = env.get(src.config_var or "") or ""
    if not folder and src.config_default:
        folder = posixpath.join(home, src.config_default)
    if folder:
        pairs.append(["<config>", posixpath.normpath(folder)])
    pairs.append(["<home>", posixpath.normpath(home or "/")])
    return pairs


def account_id(key: bytes, preset: str, pairs: list[list[str]]) -> str:
    """Keyed and length-safe: JSON keeps `a|b` + `c` apart from `a` + `b|c`.
    Values that are not UTF-8 (surrogate escapes from the environment) are
    hashed by their bytes, never dropped."""
    data = json.dumps([preset, pairs], ensure_ascii=True).encode()
    return hmac_sha256(key, data)[:ID_CHARS]


# -- the table in state.json -------------------------------------------------


@record
class AccountMark:
    """An account's mark (state.json's `accounts`, the team store's
    `team_state`): rate-limited until `until`, or needing a login; the
    loops it holds. `to_json()` is the entry as loopctl has always written
    it: its fields, in this order."""

    kind: str  # KINDS
    preset: str
    since: float
    until: float | None  # the reset (rate_limited); None: a login is needed
    loop: str | None  # whose run found it
    run_id: str | None
    error: str | None  # what the run said, one line
    fix: str
    loops: list[str]  # the loops it holds, at most MAX_NAMED_LOOPS
    probe: str | None = None  # the loop `resume` lets fire to find out

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "loops": list(self.loops)}


# Account id -> its mark.
Table = dict[str, AccountMark]


def clean_table(raw: Any) -> Table:
    """state.json's `accounts`, entry by entry; damaged entries are dropped
    (a dropped mark costs one run finding out again, never a guessed hold).
    A mark already checked (the table a pass put back into its state) is
    kept as it is."""
    if not isinstance(raw, dict):
        return {}
    table: Table = {}
    for account, entry in list(raw.items())[:MAX_ACCOUNTS]:
        clean = entry if isinstance(entry, AccountMark) else _clean_entry(account, entry)
        if clean is not None:
            table[account] = clean
    return table


def table_json(table: Any) -> Any:
    """state's `accounts` as written: each mark's entry (one read and not
    checked since, as it was read)."""
    if not isinstance(table, dict):
        return table
    return {account: mark.to_json() if isinstance(mark, AccountMark) else mark
            for account, mark in table.items()}


def _clean_entry(account: Any, entry: Any) -> AccountMark | None:
    from loopctl.domain.names import PRESETS, is_loop_name, is_run_id

    if not isinstance(account, str) or len(account) != ID_CHARS \
            or any(c not in "0123456789abcdef" for c in account) or not isinstance(entry, dict):
        return None
    kind, until, since = entry.get("kind"), entry.get("until"), entry.get("since")
    loops = entry.get("loops")
    if kind not in KINDS or entry.get("preset") not in PRESETS \
            or untrusted.moment(since) is None \
            or (until is not None and untrusted.moment(until) is None) \
            or not isinstance(loops, list) or not all(is_loop_name(n) for n in loops):
        return None

    def shown(key: str) -> str | None:  # text a human sees: one printable line
        value = untrusted.text(entry.get(key), 300)
        return untrusted.line(value) if value else None

    def name(key: str) -> str | None:
        return entry[key] if is_loop_name(entry.get(key)) else None

    return AccountMark(kind=kind, preset=entry["preset"], since=float(since or 0.0),
                       until=None if until is None else float(until), loop=name("loop"),
                       run_id=entry["run_id"] if is_run_id(entry.get("run_id")) else None,
                       error=shown("error"), fix=shown("fix") or "",
                       loops=list(loops[:MAX_NAMED_LOOPS]), probe=name("probe"))


def holding(entry: AccountMark | None, now: float) -> bool:
    """Does this mark still hold its account's loops?"""
    if entry is None:
        return False
    return entry.kind == AUTH_REQUIRED or (entry.until or 0.0) > now


def expire(table: Table, now: float) -> bool:
    """Drop rate-limit marks whose reset has passed; True when any went."""
    gone = [a for a, e in table.items() if not holding(e, now)]
    for account in gone:
        del table[account]
    return bool(gone)


@record
class Marked:
    entry: AccountMark
    new: bool  # a new mark or a new reset: worth one attention event


def mark(table: Table, account: str, kind: str, *, preset: str,
         loop: str, run_id: str, until: float | None, error: str | None, fix: str,
         now: float) -> Marked:
    """Record what a run found about its account. A second run of the same
    account finding the same thing (before the reset) adds nothing new."""
    old = table.get(account)
    if old is not None and holding(old, now) and old.kind == kind and not old.probe:
        if kind == RATE_LIMITED and (until or 0.0) > (old.until or 0.0):
            old.until = until  # a later reset: wait for it, say nothing twice
        if loop not in old.loops:
            old.loops.append(loop)
        return Marked(old, False)
    held = [n for n in old.loops if n != loop] if old is not None and holding(old, now) else []
    entry = AccountMark(kind=kind, preset=preset, since=now, until=until, loop=loop,
                        run_id=run_id, error=(error or "")[:300] or None, fix=fix,
                        loops=[loop, *held], probe=None)
    table[account] = entry
    return Marked(entry, True)


def release(table: Table, account: str) -> list[str]:
    """A run of the account succeeded: the loops its mark held."""
    entry = table.pop(account, None)
    return list(entry.loops) if entry else []


def probe(table: Table, loop: str) -> list[str]:
    """The user resumed `loop`, saying its account is fixed: that loop may
    fire to find out (the others stay held until a run succeeds, so one
    run, not all of them, pays if the fix did not work). The accounts."""
    marked = [a for a, e in table.items() if loop in e.loops]
    for account in marked:
        table[account].probe = loop
    return marked


@record
class Verdict:
    """What a due fire does: run as `preset`, or hold under `entry`."""

    preset: str | None = None  # None: the loop's own agent
    entry: AccountMark | None = None  # set: held, start no agent
    also: AccountMark | None = None  # the fallback's own mark, when it holds too


def verdict(table: Mapping[str, AccountMark], name: str, agent: str, fallback: str | None,
            account_of: Callable[[str], str], now: float) -> Verdict:
    """The loop's own account when it is free; else its fallback preset's
    when that one is free; else hold. `account_of(preset)` is only called
    while marks exist."""
    if not table:
        return Verdict()
    entry = table.get(account_of(agent))
    if entry is None or not holding(entry, now) or entry.probe == name:
        return Verdict()
    if not fallback or fallback == agent:
        return Verdict(entry=entry)
    other = table.get(account_of(fallback))
    if not holding(other, now):
        return Verdict(preset=fallback)
    return Verdict(entry=entry, also=other)


def hold(st: LoopState, entry: AccountMark, name: str, also: AccountMark | None = None) -> None:
    """Pause a due loop under its account's mark (and its fallback's): no
    agent is started. It resumes by itself at the first reset of either."""
    marks = [entry, *([also] if also else [])]
    resets = [m.until for m in marks if m.kind == RATE_LIMITED and m.until]
    st.status, st.reason = "paused", RATE_LIMITED if resets else AUTH_REQUIRED
    st.resume_at = min(resets) if resets else None
    st.note = "; ".join(hold_note(m) for m in marks)
    for mark_ in marks:
        if name not in mark_.loops and len(mark_.loops) < MAX_NAMED_LOOPS:
            mark_.loops.append(name)


def hold_note(entry: AccountMark) -> str:
    """The held loop's note: what happened, where, and the fix."""
    from loopctl.domain.timestamps import iso

    where = f"run {entry.run_id} of {entry.loop}"
    if entry.kind == AUTH_REQUIRED:
        return f"the {entry.preset} account needs a login ({where}): {entry.fix}"
    return (f"the {entry.preset} account is rate-limited until {iso(entry.until)} "
            f"({where}); it resumes by itself")


def held_by(table: Mapping[str, AccountMark], name: str, now: float) -> AccountMark | None:
    """The mark that names this loop among those it holds, if one still holds."""
    for entry in table.values():
        if name in entry.loops and holding(entry, now):
            return entry
    return None


def findings(table: Mapping[str, AccountMark], now: float,
             existing: Collection[str]) -> list[tuple[str, str]]:
    """What `doctor` says of each marked account that still has loops:
    (level, message)."""
    from loopctl.domain.timestamps import iso

    out = []
    for entry in table.values():
        names = [n for n in entry.loops if n in existing]
        if not holding(entry, now) or not names:
            continue
        loops = ", ".join(names)
        if entry.kind == AUTH_REQUIRED:
            out.append(("error", f"the {entry.preset} account of {loops} needs a login "
                                 f"(since {iso(entry.since)}): {entry.fix}; then "
                                 "`loopctl resume` one of them"))
        else:
            out.append(("warn", f"the {entry.preset} account of {loops} is rate-limited "
                                f"until {iso(entry.until)}"))
    return out
