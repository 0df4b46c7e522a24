"""The store: `loops.yaml`, `state.json`, their derived files and run records.

This is where loopctl reads and writes its own files (DESIGN §2):
`loops.yaml` (only when a command was asked to change it), `state.json` and
the two files derived from it and from the definitions (`summary.json`,
`defs-cache.json`), `events.jsonl` (appended to) and the run records. Every
rewrite is atomic (`loopctl.storage.atomic`) and every read-modify-write
happens under one file lock (`loopctl.storage.locks`). The formats live
beside it: `definitions` (the YAML document), `yamlio`, `statefile`,
`defs_cache`.

Other writers, each of files that are its own: `lease` (lease.json),
`locks` (the lock files), `runs` (pruning records and logs), `paths` (the
folders); outside storage, the supervisor (a run's log, prompt file and
unsaved marker, and the PATH shim), `workspace` (the worktrees and
`--copy`), `notify` and `events` (a line in the run's log per delivery),
`decide` (the agent's decision file) and the CLI's `export` and `gendocs`
(files the user named).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from loopctl.domain.errors import LoopctlError
from loopctl.domain.model import LoopDef, parse_loop
from loopctl.storage import defs_cache
from loopctl.storage import paths as paths_mod
from loopctl.storage.atomic import atomic_write, strict_json
from loopctl.storage.definitions import (
    DEFS_VERSION,
    MAX_DEFS_BYTES,
    Definitions,
    Signature,
    appendable_entry,
    display_key,
    key_line,
    line_of,
    parse_source,
    read_defs_source,
    top_settings,
)
from loopctl.storage.definitions import load_yaml_doc as load_yaml_doc
from loopctl.storage.paths import FILE_MODE, Paths, file_signature
from loopctl.storage.statefile import STATE_VERSION as STATE_VERSION
from loopctl.storage.statefile import SUMMARY_KEYS, encode_state, parse_state, read_state_bytes
from loopctl.storage.statefile import empty_state as empty_state
from loopctl.storage.statefile import read_state_file as read_state_file
from loopctl.storage.yamlio import dump_yaml as dump_yaml
from loopctl.storage.yamlio import dump_yaml_doc as dump_yaml_doc
from loopctl.storage.yamlio import parse_yaml_text as parse_yaml_text

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

# The `x as x` imports above re-export what moved out of this module when it
# was split, for callers written before.

# The cache holds less than the YAML it was made from; anything bigger is not ours.
MAX_CACHE_BYTES = 2 * MAX_DEFS_BYTES
LOCK_TIMEOUT = 60.0


class Store:
    def __init__(self, paths: Paths | None = None) -> None:
        self.paths = paths or paths_mod.resolve()
        # Loops whose state entry had bad values at the last read (they were
        # reset and the loop paused): drivers save and announce the repair.
        self.repairs: dict[str, list[str]] = {}
        # The parsed-definitions cache of the last full read, not yet saved.
        self.pending_cache: tuple[str, Definitions] | None = None
        self._key: bytes | None = None
        self._source_seen: bytes | None | bool = False  # loops.yaml's, when read
        self._locked = False
        # Where loop state lives (storage/shared.py): undecided (False),
        # state.json (None) or the team store.
        self._shared: Any = False

    def sibling(self) -> Store:
        """A Store of the same home that knows where its state lives (for a
        supervisor forked from this driver: no connection is shared)."""
        other = Store(self.paths)
        if self._shared is None:
            other._shared = None
        elif self._shared is not False:
            from loopctl.storage.pg.state import SharedState

            other._shared = SharedState(self._shared.dsn, self._shared.machine)
        return other

    def shared(self) -> Any:
        """The team store's state (storage/pg/state.SharedState) when this
        home has a store; None: state.json. Decided once, from the bytes of
        loops.yaml this Store read when it read them."""
        if self._shared is False:
            from loopctl.storage.shared import may_be_shared, shared_state

            if self._source_seen is False:
                self._source_seen, _ = read_defs_source(self.paths.loops_file)
            seen = self._source_seen if isinstance(self._source_seen, bytes) else None
            self._shared = shared_state(self) if may_be_shared(seen) else None
        return self._shared

    # -- locking -----------------------------------------------------------

    @contextmanager
    def lock(self, timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
        from loopctl.storage.locks import locked

        paths_mod.ensure_dir(self.paths.state_dir)
        with locked(self.paths.store_lock, timeout, f"{self.paths.store_lock} is held by "
                    "another loopctl; try again in a moment"):
            self._locked = True
            try:
                yield
            except BaseException:
                self._end_shared(failed=True)
                raise
            finally:
                self._locked = False
            self._end_shared(failed=False)

    def _end_shared(self, failed: bool) -> None:
        """Commit the team store's transaction of this lock (what was
        written stays written, as a state.json written before a failure
        does); a failure to commit is raised unless one is on its way."""
        shared = self._shared
        if not shared or not shared.in_tx:
            return
        try:
            shared.end()
        except LoopctlError:
            if not failed:
                raise

    # -- loops.yaml --------------------------------------------------------

    def read_defs(self, path: Path | None = None) -> Definitions:
        path = path or self.paths.loops_file
        source, signature = read_defs_source(path)
        if path == self.paths.loops_file and self._source_seen is False:
            self._source_seen = source
        if source is None:
            return Definitions(parsed_doc={"version": DEFS_VERSION, "loops": {}})
        mine = path == self.paths.loops_file
        key = defs_cache.digest(source)
        data = self._cache_payload() if mine else None
        cached = defs_cache.decode(data, key) if data else None
        if cached is not None:
            return Definitions(loops=cached.loops, invalid=cached.invalid, top=cached.top,
                               signature=signature, source=source, where=str(path),
                               cached_names=cached.names, append_indent=cached.append_indent,
                               cache_data=data)
        return self._parse_defs(source, signature, path, key if mine else None)

    def _cache_payload(self) -> bytes | None:
        sealed = paths_mod.read_bounded(self.paths.defs_cache, MAX_CACHE_BYTES)
        return defs_cache.unseal(self._home_key(), sealed) if sealed else None

    def cached_parts(self) -> defs_cache.Parts | None:
        """The sealed parsed copy of `loops.yaml` as it is now, undecoded
        (defs_cache.Parts), for the
        reading commands' short paths (commands/listing.py); None when there
        is none to use: they then read the definitions whole."""
        source, _ = read_defs_source(self.paths.loops_file)
        if self._source_seen is False:
            self._source_seen = source
        data = self._cache_payload() if source is not None else None
        return defs_cache.head(data, defs_cache.digest(source)) if data and source else None

    def _parse_defs(self, source: bytes, signature: Signature, path: Path,
                    cache_key: str | None) -> Definitions:
        doc, indent = parse_source(source, str(path))
        defs = Definitions(parsed_doc=doc, signature=signature, source=source, where=str(path),
                           append_indent=indent, top=top_settings(doc))
        for key_, raw in defs.raw_loops.items():
            name = display_key(key_)
            try:
                defs.loops[name] = parse_loop(key_, raw)
            except LoopctlError as exc:
                line = line_of(path, f"{name}:")
                if line and isinstance(raw, dict):
                    line = key_line(path, line, exc.message, raw) or line
                defs.invalid[name] = exc.message + (f" (line {line})" if line else "")
        if cache_key is not None:
            # Written with the next state write: a command that fails after
            # reading leaves every file as it was.
            self.pending_cache = (cache_key, defs)
        return defs

    def write_defs(self, defs: Definitions) -> None:
        source = dump_yaml_doc(defs.doc).encode()
        self.pending_cache = None  # it described the file this replaces
        paths_mod.ensure_dir(self.paths.config_dir)
        atomic_write(self.paths.loops_file, source)
        defs.signature = file_signature(self.paths.loops_file)
        defs.source = source
        # Parse what was written now, with YAML already loaded, so the next
        # state write saves the parsed copy: the driver that reads this file
        # next (a tick, the daemon, `run`) then needs no YAML at all.
        if len(source) <= MAX_DEFS_BYTES:  # over it, every reader refuses it
            try:
                self._parse_defs(source, defs.signature, self.paths.loops_file,
                                 defs_cache.digest(source))
            except LoopctlError:
                pass

    def add_loop(self, defs: Definitions, name: str, raw: dict[str, Any], loop: LoopDef) -> None:
        """Add one entry: appended to the file as text when its end allows
        (the 10,001st loop costs what the 11th does), else a full rewrite."""
        entry = appendable_entry(defs, name, raw)
        if entry is None:
            defs.raw_loops[name] = raw
            defs.loops[name] = loop
            self.write_defs(defs)
            return
        assert defs.source is not None
        source = defs.source + (b"" if defs.source.endswith(b"\n") else b"\n") + entry
        atomic_write(self.paths.loops_file, source)
        defs.source, defs.signature = source, file_signature(self.paths.loops_file)
        defs.loops[name] = loop
        body = None
        if defs.parsed_doc is not None:  # parsed just now (edited by hand since the cache)
            defs.raw_loops[name] = raw
        else:
            assert defs.cached_names is not None
            defs.cached_names = [*defs.cached_names, name]
            body = defs_cache.extended(defs.cache_data, loop)
        self._save_defs_cache(self._defs_cache_bytes(defs_cache.digest(source), defs, body))

    def _defs_cache_bytes(self, key: str, defs: Definitions,
                          body: defs_cache.Body | None = None) -> bytes | None:
        names = defs.cached_names if defs.parsed_doc is None else (
            list(defs.raw_loops) if all(isinstance(k, str) for k in defs.raw_loops) else None)
        # Notification URLs hold tokens, which never leave loops.yaml (the
        # state folder travels: GitHub's cache, a PVC, a bug report).
        if names is None or not defs_cache.json_exact(defs.top) or defs.top.get("notify") \
                or defs.top.get("notify_targets") \
                or any(loop.notify for loop in defs.loops.values()):
            return None
        return defs_cache.encode(key, defs_cache.Parsed(
            loops=defs.loops, invalid=defs.invalid, top=defs.top, names=names,
            append_indent=defs.append_indent), body)

    def keep_parsed(self) -> None:
        """Save now the parsed copy of the `loops.yaml` just read, for a
        reading command (`ls`, `status`): a hand-edited file is then parsed
        once, not by every `ls` until a driver runs. Safe without the lock,
        beside drivers: the copy is keyed by the bytes it was parsed from and
        replaces the file atomically, so a reader sees one whole copy or
        another, and a copy of other bytes (a race lost to a driver that read
        a newer file) is only not used. Never a failure: without a state
        folder it makes one (0700); on a read-only disk it gives up."""
        if self.pending_cache is None:
            return
        try:
            paths_mod.ensure_dir(self.paths.state_dir)
        except OSError:
            self.pending_cache = None
            return
        self._save_defs_cache(self._defs_cache_bytes(*self.pending_cache))

    def _save_defs_cache(self, data: bytes | None) -> None:
        """Best effort: a read-only or full disk only costs the next read time."""
        self.pending_cache = None
        if data is None or not self.paths.state_dir.is_dir():
            return
        key = self._home_key(create=True)
        if key is None:
            return  # no key of ours: a cache no one could tell from a planted one
        try:
            atomic_write(self.paths.defs_cache, defs_cache.seal(key, data), durable=False)
        except LoopctlError:
            pass

    # -- state.json --------------------------------------------------------

    def read_state(self) -> dict[str, Any]:
        """The state, each entry a LoopState (`loops`), every entry checked
        unless loopctl wrote the file as it is (DESIGN §11)."""
        from loopctl.domain.state import LoopState, repair_all

        shared = self.shared()
        if shared is not None:
            from loopctl.storage.shared import read_state

            state, self.repairs = read_state(shared, in_lock=self._locked)
            return state
        raw = read_state_bytes(self.paths.state_file)
        state = parse_state(raw, self.paths.state_file)
        if raw is not None and self._written_by_loopctl(raw):
            self.repairs = {}  # checked before it was written, unchanged since
            state["loops"] = {name: LoopState(entry) for name, entry in state["loops"].items()}
        else:
            state["loops"], self.repairs = repair_all(state["loops"])
        return state

    def read_state_packed(self) -> dict[str, Any] | None:
        """state.json with each entry as written (LoopState.to_json: the
        fields at their common value left out), when loopctl wrote it as it
        is (no entry needs a repair); None: read it with `read_state`."""
        if self.shared() is not None:
            return None  # the store's rows: the full read checks them
        raw = read_state_bytes(self.paths.state_file)
        if raw is not None and not self._written_by_loopctl(raw):
            return None  # checked first: a file that needs the full read is decoded once
        return parse_state(raw, self.paths.state_file, unpacked=False)

    def read_entry(self, name: str) -> tuple[dict[str, Any], Any] | None:
        """state.json's top level (without `loops`) and the entry for `name`
        (unpacked; None: none), decoding that entry alone, when loopctl
        wrote the file as it is; None: read it with `read_state`."""
        from loopctl.domain.state import LoopState
        from loopctl.storage.statefile import entry_of

        if self.shared() is not None:
            return None
        raw = read_state_bytes(self.paths.state_file)
        if raw is None:
            return empty_state(), None
        found = entry_of(raw, name) if self._written_by_loopctl(raw) else None
        if found is None or found[0].get("version") != STATE_VERSION:
            return None
        return found[0], None if found[1] is None else LoopState.from_written(found[1])

    def read_entries_holding(self, key: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """state.json's top level and the entries (unpacked) that may hold
        the field `key` (statefile.entries_holding: the queued loops, of
        10,000), when loopctl wrote the file as it is; None: `read_state`."""
        from loopctl.domain.state import LoopState
        from loopctl.storage.statefile import entries_holding

        if self.shared() is not None:
            return None
        raw = read_state_bytes(self.paths.state_file)
        if raw is None:
            return empty_state(), {}
        found = entries_holding(raw, key) if self._written_by_loopctl(raw) else None
        if found is None or found[0].get("version") != STATE_VERSION:
            return None
        return found[0], {name: LoopState.from_written(entry)
                          for name, entry in found[1].items()}

    def _written_by_loopctl(self, raw: bytes) -> bool:
        """True when state.json holds exactly the bytes loopctl last wrote
        (the summary records their hash): checking 10,000 entries field by
        field again would cost more than the rest of a read."""
        summary = paths_mod.read_summary(self.paths.summary_file)
        from loopctl.storage.home_key import verify

        # A MAC, not a hash: a planted state.json with a summary naming its
        # hash would skip the checks that keep a flag-shaped session id or
        # a bad number out of argv and state (DESIGN §15).
        return summary is not None and verify(self._home_key(), raw, summary.get("state_mac"))

    def _home_key(self, create: bool = False) -> bytes | None:
        """The home's secret key (storage/home_key.py), read once."""
        from loopctl.storage import home_key

        if self._key is None:
            self._key = home_key.load(self.paths.state_dir, create)
        return self._key

    def write_state(self, state: dict[str, Any]) -> None:
        from loopctl import clock
        from loopctl.domain.state import summarize
        from loopctl.storage.home_key import mac
        from loopctl.storage.statefile import top_of

        shared = self.shared()
        if shared is not None:
            from loopctl.storage.shared import write_entries

            # No state.json nor summary.json: a fast path must never decide
            # from a copy another machine's write has made stale. (With
            # neither, the tick's idle exit takes the full path.) The file
            # of the home's days before its store is kept aside.
            self._drop(self.paths.summary_file)
            try:
                os.replace(self.paths.state_file, f"{self.paths.state_file}.before-store")
            except OSError:
                pass
            write_entries(shared, state)
            if self.pending_cache is not None:
                self._save_defs_cache(self._defs_cache_bytes(*self.pending_cache))
            return
        summarize(state)
        # The tick fast path compares this with now: a clock set back must
        # not leave loops waiting on due times from the future.
        state["saved_at"] = clock.now()
        paths_mod.ensure_dir(self.paths.state_dir)
        state["version"] = STATE_VERSION
        data = encode_state(top_of(state),
                            {name: st.to_json() for name, st in state["loops"].items()})
        summary = {k: state.get(k) for k in SUMMARY_KEYS}
        key = self._home_key(create=True)
        summary["state_mac"] = key and mac(key, data)

        def describe(signature: list[int]) -> None:
            # Before state.json takes its name: a daemon woken by that rename
            # finds the summary of the file it was woken for, not a stale
            # one (stale, it would take a full pass). Until the rename a
            # reader sees another signature, and reads state.json itself.
            summary["state_sig"] = signature
            try:
                # Derived: if it is lost or stale, readers fall back to state.json.
                atomic_write(self.paths.summary_file, strict_json(summary).encode(),
                             durable=False)
            except LoopctlError:
                self._drop(self.paths.summary_file)

        atomic_write(self.paths.state_file, data, before_replace=describe)
        if self.pending_cache is not None:
            self._save_defs_cache(self._defs_cache_bytes(*self.pending_cache))

    @staticmethod
    def _drop(path: Path) -> None:
        try:
            path.unlink()
        except OSError:
            pass

    def record_delivery(self, event: dict[str, Any], key: str, error: str | None) -> None:
        """Note a failed delivery on its loop (`key`: hook_error, notify_error) or clear it."""
        from loopctl import clock
        from loopctl.domain.state import LoopState

        with self.lock():
            state = self.read_state()
            st: LoopState | None = state["loops"].get(event.get("loop"))
            if st is None or (error is None and getattr(st, key) is None):
                return
            setattr(st, key, None if error is None else {
                "at": clock.now(), "message": error[:1000], "status": event.get("status")})
            self.write_state(state)

    # -- events ------------------------------------------------------------

    def append_event(self, event: dict[str, Any]) -> None:
        """One JSON line per event; the caller holds the store lock."""
        paths_mod.ensure_dir(self.paths.state_dir)
        line = (strict_json(event) + "\n").encode()
        fd = os.open(self.paths.events_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
        try:
            os.write(fd, line)
        except OSError as exc:
            raise LoopctlError(f"cannot write {self.paths.events_file}: {exc.strerror}") from None
        finally:
            os.close(fd)

    # -- run records -------------------------------------------------------

    def run_dir(self, loop: str) -> Path:
        """`runs/<loop>`, created private; refused when either level is a
        symlink or not a directory."""
        from loopctl.storage.runs import start_index

        paths_mod.real_dir(self.paths.runs_dir)
        legacy = os.path.lexists(self.paths.loop_runs_dir(loop))
        folder = paths_mod.real_dir(self.paths.loop_runs_dir(loop))
        start_index(self.paths, loop, legacy)  # before any agent can plant a file
        return folder

    def remove_runs(self, loop: str) -> None:
        """Delete a loop's run files; a symlink is removed, never followed."""
        import shutil
        import stat

        folder = self.paths.loop_runs_dir(loop)
        for index in (self.paths.run_index(loop), self.paths.run_digest(loop)):
            try:
                index.unlink()
            except OSError:
                pass
        try:
            mode = os.lstat(folder).st_mode
        except FileNotFoundError:
            return
        except OSError as exc:
            raise LoopctlError(f"cannot remove {folder}: {exc.strerror}") from None
        if stat.S_ISDIR(mode):
            shutil.rmtree(folder, ignore_errors=True)  # rmtree never follows links inside
        else:
            try:
                folder.unlink()
            except OSError as exc:
                raise LoopctlError(f"cannot remove {folder}: {exc.strerror}") from None

    def write_json(self, path: Path, data: dict[str, Any]) -> None:
        if path.parent.parent == self.paths.runs_dir:
            paths_mod.real_dir(paths_mod.real_dir(path.parent.parent) / path.parent.name)
        else:
            paths_mod.ensure_dir(path.parent)
        atomic_write(path, (strict_json(data, indent=2) + "\n").encode())

