"""Apprise with only the plugins that the URLs at hand need.

Apprise's plugin manager imports every one of its ~190 plugins the first
time it is asked about any scheme: ~0.1 s of CPU, as much as importing
Apprise itself, paid by each delivery and by each `--notify` check
(bench/README.md "Notifications"). Apprise 2.3 has no public way to load
one plugin, so this module is the one place that leans on how its manager
loads: `load_modules(path, name)` imports `name.<entry>` for each entry
listed in `path`, and a manager that has loaded some path answers from
what it holds without loading the rest. tests/integrations/
test_apprise_plugins.py fails loudly when a new Apprise stops doing so.

Which module serves a scheme is found in the plugins' source: the files
that quote the scheme at all (a byte search, ~5 ms for all of them), then
their `protocol =` / `secure_protocol =` lines. A scheme not found that way
(a plugin that computes its protocol) loads every plugin, as Apprise would.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Iterator

# A plugin class's `protocol = "x"` or `secure_protocol = ("x", "y")`.
_ASSIGNED = re.compile(r"^\s+(?:secure_)?protocol\s*=\s*(\([^)]*\)|[^\n]*)", re.M)
_QUOTED = re.compile(r"[\"']([^\"']+)[\"']")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]{0,31})://")


def load_for(urls: Iterable[str]) -> None:
    """Make Apprise's plugin manager know the schemes of `urls`, importing
    only the plugin modules that serve them (or, if one is not found, all)."""
    from apprise import NotificationManager

    manager = NotificationManager()
    wanted = {m.group(1).lower() for url in urls if (m := _SCHEME.match(url))}
    if manager:  # loaded before: by us (only some plugins) or in full
        wanted = {scheme for scheme in wanted if scheme not in manager}
    if not wanted:
        return
    modules = {_module_for(scheme) for scheme in wanted}
    if None in modules:  # unknown to the scan: every plugin, as Apprise would
        manager.load_modules()
        return
    try:
        with tempfile.TemporaryDirectory(prefix="loopctl-apprise-") as listing:
            for name in modules:
                # No `.py`: were the real import to fail, Apprise's fallback
                # cannot execute this empty file as the plugin.
                open(os.path.join(listing, str(name)), "wb").close()
            manager.load_modules(path=listing, name="apprise.plugins")
    except OSError:  # no temporary folder to list them in: all, as Apprise would
        manager.load_modules()


def _module_for(scheme: str) -> str | None:
    """The name of the entry under apprise/plugins whose class declares
    `scheme` as its protocol, or None."""
    needles = (f'"{scheme}"'.encode(), f"'{scheme}'".encode())
    for module, paths in plugin_sources():
        for path in paths:
            with open(path, "rb") as source:
                text = source.read()
            # The byte search first: decoding and matching every file costs 10x.
            if any(needle in text for needle in needles) and scheme in declared(text):
                return module
    return None


def plugin_sources() -> Iterator[tuple[str, list[str]]]:
    """Each entry under apprise/plugins that may hold a plugin: its module
    name and its Python files."""
    import apprise.plugins

    folder = os.path.dirname(apprise.plugins.__file__)
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if not entry.name.startswith(("_", "base")):
            yield entry.name.removesuffix(".py"), _sources(entry)


def _sources(entry: os.DirEntry[str]) -> list[str]:
    """The Python files of one plugins entry: the module, or a package's."""
    if entry.name.endswith(".py"):
        return [entry.path]
    if entry.is_dir():
        return [os.path.join(entry.path, name) for name in sorted(os.listdir(entry.path))
                if name.endswith(".py")]
    return []


def declared(text: bytes) -> set[str]:
    """The schemes a plugin's source declares as its `protocol` or
    `secure_protocol`."""
    source = text.decode("utf-8", "replace")
    return {scheme for m in _ASSIGNED.finditer(source) for scheme in _QUOTED.findall(m.group(1))}
