"""`agents`, `digest` and notification targets."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from loopctl.commands.common import snapshot
from loopctl.commands.views import list_loops, read_events, team_home
from loopctl.domain.errors import NoSuchLoop, UsageError
from loopctl.domain.model import parse_loop
from loopctl.domain.result import Result
from loopctl.fast.data_class import record
from loopctl.storage.store import Store

if TYPE_CHECKING:
    from loopctl.domain.digest import Digest


@record(frozen=True)
class AgentRow(Result):
    """One preset: its binary and where PATH finds it (`path`, None: not
    found), the `version` it says, the `argv` a run executes, how it is
    confined, and how to install it."""

    VERSIONED = False

    preset: str
    binary: str
    path: str | None
    version: str | None
    argv: list[str]
    prompt_on_stdin: bool
    safe_default: Any
    yolo: list[str]
    warning: str | None
    verified: Any
    sandbox_write: list[str]
    confined_by_default: bool
    install: str | None


@record(frozen=True)
class Agents(Result):
    """`agents`: every preset, and whether this machine can confine runs."""

    agents: list[AgentRow]
    sandbox: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {**Result.to_json(self), "agents": [row.to_json() for row in self.agents]}


def agents(sandbox: dict[str, Any]) -> Agents:
    return Agents(agents=agents_table(), sandbox=sandbox)


def agents_table() -> list[AgentRow]:
    """Every preset: on PATH?, version (asked with a short timeout), argv."""
    import shutil
    from concurrent.futures import ThreadPoolExecutor

    from loopctl.agents.presets import INSTALL, PRESETS, build_argv
    from loopctl.domain.confinement import preset_write

    presets = list(PRESETS.values())
    paths = {preset.name: shutil.which(preset.binary) for preset in presets}
    found = [preset for preset in presets if paths[preset.name]]
    with ThreadPoolExecutor(max_workers=8) as pool:
        said = pool.map(lambda preset: _version(paths[preset.name], preset.version_args), found)
        versions = dict(zip([preset.name for preset in found], said, strict=True))
    rows = []
    for preset in presets:
        loop = parse_loop("example", {"prompt": "PROMPT", "every": "1h", "agent": preset.name})
        argv, stdin = build_argv(loop, "PROMPT", "PROMPT_FILE", "RUN_ID")
        rows.append(AgentRow(
            preset=preset.name, binary=preset.binary, path=paths[preset.name],
            version=versions.get(preset.name), argv=argv, prompt_on_stdin=stdin is not None,
            safe_default=preset.safe_default, yolo=list(preset.bypass), warning=preset.warning,
            verified=preset.verified, sandbox_write=list(preset_write(preset.name, "~")),
            confined_by_default=preset.name != "shell", install=INSTALL.get(preset.name)))
    return rows


def _version(binary: str | None, args: tuple[str, ...]) -> str | None:
    """The first line `binary ARGS` prints, asked with a short timeout."""
    import os

    from loopctl.integrations import subprocess_runner as runner

    if not args or binary is None:
        return None
    try:
        out = runner.run([binary, *args], env=os.environ, timeout=5, out_limit=4096)
    except OSError:
        return None
    lines = (out.out or out.err).decode("utf-8", "replace").strip().splitlines()
    return lines[0][:60] if out.exit_code == 0 and lines else None


def digest(store: Store, since_s: int) -> Digest:
    """What happened in the last `since_s` seconds, "needs you" first."""
    from loopctl.domain import digest as report
    from loopctl.storage.runs import list_records

    defs, state, now = snapshot(store)
    loops = list_loops(store)
    records = {name: list_records(store.paths, name) for name in defs.loops}
    cut = False
    if team_home(store):  # every machine's runs in the window, not this one's alone
        from loopctl.commands.team_view import team_records

        records, cut = team_records(store, list(defs.loops), records, now - since_s)
    built = report.build(loops, records, read_events(store), now - since_s, now)
    return built.cut_short() if cut else built


def notify_targets(store: Store, name: str | None) -> list[str]:
    """A loop's targets (with the shared ones), or every target of every loop."""
    from loopctl.domain.checks import targets_for

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


def resolve_targets(store: Store, values: list[str]) -> list[str]:
    """`--notify` URLs and names of top-level `notify_targets:` as URLs."""
    from loopctl.integrations.notify import resolve

    named = store.read_defs().top.get("notify_targets") \
        if any("://" not in v for v in values) else None
    return resolve(values, named)


def target_names(store: Store) -> dict[str, str]:
    """Each URL of top-level `notify_targets:` by its name: a result names
    the target its owner wrote, where the masked URL alone may not tell."""
    table = store.read_defs().top.get("notify_targets")
    names: dict[str, str] = {}
    for name, found in (table.items() if isinstance(table, dict) else []):
        for url in [found] if isinstance(found, str) else list(found):
            names.setdefault(url, name)
    return names


def send_notification(urls: list[str], title: str, body: str, folder: Path | None = None,
                      names: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Send now and wait, bounded like every delivery (commands that report
    each result), each result with its target's `name` when it has one.
    `folder`: where the sender starts (the state folder when there is one:
    `-m` imports from the working directory)."""
    from loopctl.integrations.notify import check_urls, send_bounded

    where = str(folder) if folder is not None and folder.is_dir() else "/"
    checked = check_urls(urls)
    results = send_bounded(checked, title, body, where)
    for result, url in zip(results, checked, strict=False):
        if url in (names or {}):
            result["name"] = (names or {})[url]
    return results
