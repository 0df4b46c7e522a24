"""`agents`, `digest` and notification targets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loopctl.commands.common import snapshot
from loopctl.commands.views import list_loops, read_events
from loopctl.domain.digest import Digest
from loopctl.domain.errors import NoSuchLoop, UsageError
from loopctl.domain.model import parse_loop
from loopctl.storage.store import Store


def agents_table() -> list[dict[str, Any]]:
    """Every preset: on PATH?, version (asked with a short timeout), argv."""
    import os
    import shutil
    from concurrent.futures import ThreadPoolExecutor

    from loopctl.agents.presets import INSTALL, PRESETS, build_argv
    from loopctl.domain.confinement import preset_write
    from loopctl.integrations import subprocess_runner as runner

    def version(binary: str, args: tuple[str, ...]) -> str | None:
        if not args:
            return None
        try:
            out = runner.run([binary, *args], env=os.environ, timeout=5, out_limit=4096)
        except OSError:
            return None
        lines = (out.out or out.err).decode("utf-8", "replace").strip().splitlines()
        return lines[0][:60] if out.exit_code == 0 and lines else None

    rows = []
    for preset in PRESETS.values():
        loop = parse_loop("example", {"prompt": "PROMPT", "every": "1h", "agent": preset.name})
        argv, stdin = build_argv(loop, "PROMPT", "PROMPT_FILE", "RUN_ID")
        rows.append({"preset": preset.name, "binary": preset.binary,
                     "path": shutil.which(preset.binary), "version": None, "argv": argv,
                     "prompt_on_stdin": stdin is not None,
                     "safe_default": preset.safe_default, "yolo": list(preset.bypass),
                     "warning": preset.warning, "verified": preset.verified,
                     "sandbox_write": list(preset_write(preset.name, "~")),
                     "confined_by_default": preset.name != "shell",
                     "install": INSTALL.get(preset.name)})
    with ThreadPoolExecutor(max_workers=8) as pool:
        found = [r for r in rows if r["path"]]
        versions = pool.map(lambda r: version(r["path"], PRESETS[r["preset"]].version_args),
                            found)
        for row, ver in zip(found, versions, strict=True):
            row["version"] = ver
    return rows


def digest(store: Store, since_s: int) -> Digest:
    """What happened in the last `since_s` seconds, "needs you" first."""
    from loopctl.domain import digest as report
    from loopctl.storage.runs import list_records

    defs, state, now = snapshot(store)
    loops = list_loops(store)
    records = {name: list_records(store.paths, name) for name in defs.loops}
    return report.build(loops, records, read_events(store), now - since_s, now)


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
