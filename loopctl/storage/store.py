"""The only module that writes loopctl's files (DESIGN §2).

`loops.yaml` is the user's: read strictly, written only when a command was
asked to change it, and an entry that fails validation is carried through
every rewrite exactly as parsed. `state.json` is loopctl's: runtime status of
every loop. Every write is atomic (temp file, fsync, rename) and every
read-modify-write happens under one file lock (`loopctl.storage.locks`).
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from loopctl.domain.errors import LoopctlError, UnreadableError
from loopctl.domain.model import LoopDef, check_notify_targets, check_notify_urls, parse_loop
from loopctl.domain.plain import factory, record
from loopctl.domain.untrusted import shorten
from loopctl.storage import defs_cache
from loopctl.storage import paths as paths_mod
from loopctl.storage.paths import FILE_MODE, Paths, file_signature

STATE_VERSION = 1
DEFS_VERSION = 1
MAX_DEFS_BYTES = 8 * 1024 * 1024
# The cache holds less than the YAML it was made from; anything bigger is not ours.
MAX_CACHE_BYTES = 2 * MAX_DEFS_BYTES
LOCK_TIMEOUT = 60.0
TOP_KEYS = {"version", "loops", "on_attention", "notify", "notify_targets"}

Signature = list[int] | None


_MISSING = object()  # `null:` is a key too: None cannot mean "not found"


@record
class Definitions:
    """A read of `loops.yaml`: what validated, what did not, and the raw
    document, parsed only when a command needs it (a cached read has none)."""

    loops: dict[str, LoopDef] = factory(dict)
    invalid: dict[str, str] = factory(dict)
    signature: Signature = None
    # Top-level settings every driver needs: on_attention, notify.
    top: dict[str, Any] = factory(dict)
    source: bytes | None = None
    where: str = "loops.yaml"
    cached_names: list[str] | None = None
    append_indent: int | None = None
    parsed_doc: dict[str, Any] | None = None
    cache_data: bytes | None = None  # the cache file it came from

    @property
    def doc(self) -> dict[str, Any]:
        if self.parsed_doc is None:
            self.parsed_doc = ({"version": DEFS_VERSION, "loops": {}} if self.source is None
                               else parse_source(self.source, self.where)[0])
        return self.parsed_doc

    @property
    def raw_loops(self) -> dict[str, Any]:
        loops = self.doc.setdefault("loops", {})
        assert isinstance(loops, dict)
        return loops

    @property
    def names(self) -> list[str]:
        if self.parsed_doc is None and self.cached_names is not None:
            return list(self.cached_names)
        return [display_key(k) for k in self.raw_loops]

    def key(self, name: str) -> Any:
        """The key as written: a hand-written `123:` is an int in YAML,
        `true:` a bool and `null:` None; each answers to its written form."""
        if name in self.raw_loops:
            return name
        return next((k for k in self.raw_loops if display_key(k) == name), _MISSING)

    def has(self, name: str) -> bool:
        if self.parsed_doc is None and self.cached_names is not None:
            return name in self.cached_names
        return self.key(name) is not _MISSING

    def raw(self, name: str) -> Any:
        return self.raw_loops[self.key(name)]

    def remove(self, name: str) -> None:
        if self.has(name):
            del self.raw_loops[self.key(name)]


def display_key(key: Any) -> str:
    """A loop key as YAML writes it: `true`, `null`, `123`."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    return "null" if key is None else str(key)[:200]


def empty_state() -> dict[str, Any]:
    return {"version": STATE_VERSION, "defs_sig": None, "wake_at": None,
            "busy": False, "loops": {}}


class Store:
    def __init__(self, paths: Paths | None = None) -> None:
        self.paths = paths or paths_mod.resolve()
        # Loops whose state entry had bad values at the last read (they were
        # reset and the loop paused): drivers save and announce the repair.
        self.repairs: dict[str, list[str]] = {}
        # The parsed-definitions cache of the last full read, not yet saved.
        self.pending_cache: tuple[str, Definitions] | None = None
        self._key: bytes | None = None

    # -- locking -----------------------------------------------------------

    @contextmanager
    def lock(self, timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
        from loopctl.storage.locks import locked

        paths_mod.ensure_dir(self.paths.state_dir)
        with locked(self.paths.store_lock, timeout, f"{self.paths.store_lock} is held by "
                    "another loopctl; try again in a moment"):
            yield

    # -- loops.yaml --------------------------------------------------------

    def read_defs(self, path: Path | None = None) -> Definitions:
        path = path or self.paths.loops_file
        source, signature = read_defs_source(path)
        if source is None:
            return Definitions(parsed_doc={"version": DEFS_VERSION, "loops": {}})
        mine = path == self.paths.loops_file
        key = defs_cache.digest(source)
        sealed = paths_mod.read_bounded(self.paths.defs_cache, MAX_CACHE_BYTES) if mine else None
        data = defs_cache.unseal(self._home_key(), sealed) if sealed else None
        cached = defs_cache.decode(data, key) if data else None
        if cached is not None:
            return Definitions(loops=cached.loops, invalid=cached.invalid, top=cached.top,
                               signature=signature, source=source, where=str(path),
                               cached_names=cached.names, append_indent=cached.append_indent,
                               cache_data=data)
        return self._parse_defs(source, signature, path, key if mine else None)

    def _parse_defs(self, source: bytes, signature: Signature, path: Path,
                    cache_key: str | None) -> Definitions:
        doc, indent = parse_source(source, str(path))
        defs = Definitions(parsed_doc=doc, signature=signature, source=source, where=str(path),
                           append_indent=indent, top=_top_settings(doc))
        for key_, raw in defs.raw_loops.items():
            name = display_key(key_)
            try:
                defs.loops[name] = parse_loop(key_, raw)
            except LoopctlError as exc:
                line = _line_of(path, f"{name}:")
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
        entry = _appendable_entry(defs, name, raw)
        if entry is None:
            defs.raw_loops[name] = raw
            defs.loops[name] = loop
            self.write_defs(defs)
            return
        assert defs.source is not None and defs.cached_names is not None
        source = defs.source + (b"" if defs.source.endswith(b"\n") else b"\n") + entry
        atomic_write(self.paths.loops_file, source)
        defs.source, defs.signature = source, file_signature(self.paths.loops_file)
        defs.loops[name] = loop
        defs.cached_names = [*defs.cached_names, name]
        loops_json = defs_cache.extended(defs.cache_data, loop)
        self._save_defs_cache(self._defs_cache_bytes(defs_cache.digest(source), defs, loops_json))

    def _defs_cache_bytes(self, key: str, defs: Definitions,
                          loops_json: bytes | None = None) -> bytes | None:
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
            append_indent=defs.append_indent), loops_json)

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
        from loopctl.domain.state import repair_all

        raw = read_state_bytes(self.paths.state_file)
        state = parse_state(raw, self.paths.state_file)
        if raw is not None and self._written_by_loopctl(raw):
            self.repairs = {}  # checked before it was written, unchanged since
        else:
            state["loops"], self.repairs = repair_all(state["loops"])
        return state

    def _written_by_loopctl(self, raw: bytes) -> bool:
        """True when state.json holds exactly the bytes loopctl last wrote
        (the summary records their hash): checking 10,000 entries field by
        field again would cost more than the rest of a read."""
        from loopctl.storage.home_key import verify

        summary = paths_mod.read_summary(self.paths.summary_file)
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

        summarize(state)
        # The tick fast path compares this with now: a clock set back must
        # not leave loops waiting on due times from the future.
        state["saved_at"] = clock.now()
        paths_mod.ensure_dir(self.paths.state_dir)
        data = strict_json(state, sort_keys=False).encode()
        atomic_write(self.paths.state_file, data)
        summary = {k: state.get(k) for k in SUMMARY_KEYS}
        key = self._home_key(create=True)
        summary.update(state_mac=key and mac(key, data),
                       state_sig=file_signature(self.paths.state_file))
        try:
            # Derived: if it is lost or stale, readers fall back to state.json.
            atomic_write(self.paths.summary_file, strict_json(summary).encode(), durable=False)
        except LoopctlError:
            self._drop(self.paths.summary_file)
        if self.pending_cache is not None:
            self._save_defs_cache(self._defs_cache_bytes(*self.pending_cache))

    @staticmethod
    def _drop(path: Path) -> None:
        try:
            path.unlink()
        except OSError:
            pass

    def record_delivery(self, event: dict[str, Any], key: str, error: str | None) -> None:
        """Note a failed delivery on the event's loop (`hook_error`,
        `notify_error`), or clear the note when this one got through."""
        from loopctl import clock

        with self.lock():
            state = self.read_state()
            st = state["loops"].get(event.get("loop"))
            if st is None or (error is None and st.get(key) is None):
                return
            st[key] = None if error is None else {
                "at": clock.now(), "message": error[:1000], "status": event.get("status")}
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
        paths_mod.real_dir(self.paths.runs_dir)
        return paths_mod.real_dir(self.paths.loop_runs_dir(loop))

    def remove_runs(self, loop: str) -> None:
        """Delete a loop's run files; a symlink is removed, never followed."""
        import shutil
        import stat

        folder = self.paths.loop_runs_dir(loop)
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


def strict_json(data: Any, indent: int | None = None, sort_keys: bool = True) -> str:
    """JSON that every parser accepts: NaN and infinities are refused, never
    written (they would make the file unreadable to `jq` and browsers)."""
    try:
        return json.dumps(data, sort_keys=sort_keys, allow_nan=False, indent=indent,
                          separators=None if indent else (",", ":"))
    except ValueError as exc:
        raise LoopctlError(f"refusing to write a non-finite number ({exc}); "
                           "the previous file is unchanged") from None


# What the `tick` fast path needs, kept beside state.json (entry.py).
SUMMARY_KEYS = ("version", "wake_at", "busy", "defs_sig", "saved_at")


def read_state_bytes(path: Path) -> bytes | None:
    """state.json's bytes; None when there is none yet (an empty file is
    damage, and fails to parse like any other)."""
    try:
        # O_NONBLOCK: a FIFO planted as state.json must not hang every command.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UnreadableError(f"{path}: cannot read state: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "Is a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise UnreadableError(f"{path}: cannot read state: {kind}")
        with os.fdopen(os.dup(fd), "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise UnreadableError(f"{path}: cannot read state: {exc.strerror}") from None
    finally:
        os.close(fd)


def read_state_file(path: Path) -> dict[str, Any]:
    return parse_state(read_state_bytes(path), path)


def parse_state(raw: bytes | None, path: Path) -> dict[str, Any]:
    if raw is None:
        return empty_state()
    try:
        state = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise UnreadableError(f"{path}: state is not valid JSON ({exc}); "
                              "move it aside to start over") from None
    if not isinstance(state, dict):
        raise UnreadableError(f"{path}: state is a JSON {type(state).__name__}; expected an "
                              "object with 'version' and 'loops'; move it aside to start over")
    if state.get("version") != STATE_VERSION:
        raise UnreadableError(f"{path}: unknown state version {shorten(state.get('version'))}; "
                              f"expected {STATE_VERSION}")
    if not isinstance(state.get("loops"), dict):
        raise UnreadableError(f"{path}: state has no 'loops' mapping; move it aside to "
                              "start over")
    return state


# -- YAML ------------------------------------------------------------------


def _strict_loader() -> type:
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class StrictLoader(base):  # type: ignore[misc, valid-type]
        """SafeLoader that refuses duplicate keys (PyYAML keeps the last one
        silently, which would drop a loop without a word) and aliases (ten
        nested ones expand to billions of nodes in any walk of the result)."""

        def get_single_node(self) -> Any:
            node = super().get_single_node()
            if node is not None:
                _refuse_aliases(node)
            return node

        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                except TypeError:
                    raise yaml.constructor.ConstructorError(
                        None, None, "unhashable key", key_node.start_mark) from None
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

        def construct_object(self, node: Any, deep: bool = False) -> Any:
            try:
                return super().construct_object(node, deep=deep)
            except yaml.YAMLError:
                raise
            except (ValueError, KeyError, AttributeError, TypeError) as exc:
                # The safe constructors raise these for `2026-02-30` or
                # `!!int x`; report them like any YAML error, with the line.
                value = node.value if isinstance(node.value, str) else node.tag
                raise yaml.constructor.ConstructorError(
                    None, None, f"bad value {value!r} ({type(exc).__name__})",
                    node.start_mark) from None

    StrictLoader.add_constructor(
        "tag:yaml.org,2002:map", StrictLoader.construct_mapping)
    return StrictLoader


MAX_YAML_NODES = 1_000_000


def _refuse_aliases(root: Any) -> None:
    """An alias is a node reached twice; refused before anything is built.
    Linear in the document: each node is visited once."""
    import yaml

    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            raise yaml.constructor.ConstructorError(
                None, None, "YAML aliases (*name) are not allowed in loopctl files; "
                "write the value out", node.start_mark)
        seen.add(id(node))
        if len(seen) > MAX_YAML_NODES:
            raise yaml.constructor.ConstructorError(
                None, None, f"more than {MAX_YAML_NODES} values", node.start_mark)
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack.extend((key, value))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)


def _yaml_error(exc: Exception, where: str) -> UnreadableError:
    import yaml

    if isinstance(exc, yaml.YAMLError):
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        line = f", line {mark.line + 1}" if mark is not None else ""
        return UnreadableError(f"{where}{line}: not valid YAML: {problem}")
    # The safe constructors raise these for values like `2026-02-30` or
    # `!!int x`; they are still a broken file, not a crash.
    return UnreadableError(f"{where}: not valid YAML: bad value "
                           f"({type(exc).__name__}: {exc})")


def parse_yaml_node(text: str, where: str) -> tuple[Any, Any]:
    """The document and its root node (for where the text can be extended)."""
    import yaml

    loader = _strict_loader()(text)
    try:
        node = loader.get_single_node()
        return (None if node is None else loader.construct_document(node)), node
    except (yaml.YAMLError, ValueError, KeyError, AttributeError, TypeError,
            RecursionError) as exc:
        raise _yaml_error(exc, where) from None
    finally:
        loader.dispose()


def parse_yaml_text(text: str, where: str) -> Any:
    return parse_yaml_node(text, where)[0]


def read_defs_source(path: Path) -> tuple[bytes | None, Signature]:
    """The bytes of `loops.yaml` (None: no file yet) and their signature,
    taken from the same open file."""
    try:
        with open(path, "rb") as handle:
            st = os.fstat(handle.fileno())
            data = handle.read(MAX_DEFS_BYTES + 1)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        raise UnreadableError(f"{path}: cannot read: {exc.strerror}") from None
    if len(data) > MAX_DEFS_BYTES:
        raise UnreadableError(f"{path}: larger than {MAX_DEFS_BYTES // 2**20} MiB; "
                              "expected a loops.yaml")
    return data, [st.st_mtime_ns, st.st_size, st.st_ino]


def load_yaml_doc(path: Path) -> dict[str, Any]:
    """Read `loops.yaml`, failing closed (exit 3) with the path and line."""
    data, _ = read_defs_source(path)
    if data is None:
        raise UnreadableError(f"{path}: cannot read: No such file or directory")
    return parse_source(data, str(path))[0]


def parse_source(data: bytes, where: str) -> tuple[dict[str, Any], int | None]:
    """The checked document, and the column at which a new loop can be
    appended as text (None: the file must be rewritten to add one)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UnreadableError(f"{where}, line {line}: not UTF-8 text; expected YAML") from None
    if not text.strip():
        raise UnreadableError(f"{where}: empty; expected 'version: 1' and 'loops:'")
    doc, root = parse_yaml_node(text, where)
    path = Path(where)
    if not isinstance(doc, dict):
        raise UnreadableError(f"{where}, line 1: expected a mapping with 'version' and "
                              f"'loops', got {type(doc).__name__}")
    if doc.get("version") != DEFS_VERSION:
        line = _line_of(path, "version:") or 1
        raise UnreadableError(f"{where}, line {line}: unknown version "
                              f"{doc.get('version')!r}; expected version: {DEFS_VERSION}")
    unknown = sorted(str(k) for k in doc if k not in TOP_KEYS)
    if unknown:
        line = _line_of(path, f"{unknown[0]}:") or 1
        raise UnreadableError(f"{where}, line {line}: unknown top-level key {unknown[0]!r}; "
                              "expected version, loops, on_attention, notify, notify_targets")
    loops = doc.get("loops")
    if loops is None:
        doc["loops"] = {}
    elif not isinstance(loops, dict):
        line = _line_of(path, "loops:") or 1
        raise UnreadableError(f"{where}, line {line}: 'loops' must be a mapping of "
                              "loop names to definitions")
    hook = doc.get("on_attention")
    if hook is not None and not isinstance(hook, str):
        line = _line_of(path, "on_attention:") or 1
        raise UnreadableError(f"{where}, line {line}: 'on_attention' must be a path")
    try:
        check_notify_urls(doc.get("notify"), "top level")
    except LoopctlError as exc:
        line = _line_of(path, "notify:") or 1
        raise UnreadableError(f"{where}, line {line}: {exc.message}") from None
    try:
        check_notify_targets(doc.get("notify_targets"), "top level")
    except LoopctlError as exc:
        line = _line_of(path, "notify_targets:") or 1
        raise UnreadableError(f"{where}, line {line}: {exc.message}") from None
    return doc, _append_indent(root, text)


def _top_settings(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: doc[k] for k in ("on_attention", "notify", "notify_targets")
            if doc.get(k) is not None}


# YAML 1.1 line breaks besides \n; with any of them the marks' line numbers
# and a split on \n would disagree.
_OTHER_BREAKS = ("\r", "\x85", "\u2028", "\u2029")


def _append_indent(root: Any, text: str) -> int | None:
    """The column of the loop names when `loops` is the file's last key, a
    non-empty block mapping followed by nothing but blank or comment lines:
    then an entry written at that column, at the end, extends it."""
    import yaml

    if not isinstance(root, yaml.MappingNode) or root.flow_style or not root.value \
            or any(b in text for b in _OTHER_BREAKS):
        return None
    key, value = root.value[-1]
    if key.value != "loops" or not isinstance(value, yaml.MappingNode) \
            or value.flow_style or not value.value:
        return None
    end = value.end_mark
    rest = text.split("\n")[end.line:]
    if rest:
        rest[0] = rest[0][end.column:]
    if any(line.strip() and not line.lstrip().startswith("#") for line in rest):
        return None
    column = value.value[0][0].start_mark.column
    return column if isinstance(column, int) and 0 < column <= 64 else None


def _appendable_entry(defs: Definitions, name: str, raw: dict[str, Any]) -> bytes | None:
    """`name: raw` as YAML text at the file's loop indentation, if the file
    can take it at its end and it reads back exactly as `raw`."""
    if defs.parsed_doc is not None or defs.append_indent is None or defs.source is None \
            or defs.cached_names is None:
        return None
    pad = " " * defs.append_indent
    text = "".join(pad + line if line.strip() else line
                   for line in dump_yaml({name: raw}).splitlines(keepends=True))
    try:
        back = parse_yaml_text("loops:\n" + text, "new entry")
    except UnreadableError:
        return None
    return text.encode() if back == {"loops": {name: raw}} else None


def _line_of(path: Path, key: str) -> int | None:
    """Line of the first `key` at the start of a line (error messages only)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    pattern = re.compile(r"^\s*['\"]?" + re.escape(key.rstrip(":")) + r"['\"]?\s*:", re.M)
    match = pattern.search(text)
    return text.count("\n", 0, match.start()) + 1 if match else None


def dump_yaml(doc: Any) -> str:
    """YAML for people to read: key order kept, multi-line text as `|` blocks."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = "|" if "\n" in value and value == value.rstrip(" ") else None
        if "\x85" in value:
            style = '"'  # NEL does not survive plain or block style
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return yaml.dump(doc, Dumper=Dumper, sort_keys=False, allow_unicode=True,
                     default_flow_style=False, width=100)


def dump_yaml_doc(doc: dict[str, Any]) -> str:
    # `loops` last, so the next `start` can append its entry as text.
    ordered = {k: v for k, v in doc.items() if k != "loops"}
    if "loops" in doc:
        ordered["loops"] = doc["loops"]
    return ("# loopctl loop definitions; see `loopctl start --help` for the keys\n"
            + dump_yaml(ordered))


# -- atomic files ----------------------------------------------------------


def atomic_write(path: Path, data: bytes, durable: bool = True) -> None:
    """Replace `path` with `data` so a reader sees the old or the new file,
    whole, whatever happens to this process (SIGKILL, full disk); `durable`
    also survives a power cut (a cache that can be rebuilt skips that)."""
    fd, tmp = _create_temp(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise LoopctlError(f"cannot write {path}: {exc.strerror}; "
                               "the previous file is unchanged") from None
        raise
    if durable:
        _fsync_dir(path.parent)


def _create_temp(path: Path) -> tuple[int, str]:
    """A new private file beside `path` (what tempfile.mkstemp does, without
    the ~5 ms its import of shutil, random and the compressors costs every
    run)."""
    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{os.urandom(6).hex()}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                           | getattr(os, "O_CLOEXEC", 0), FILE_MODE), tmp
        except FileExistsError:
            continue
        except OSError as exc:
            raise LoopctlError(f"cannot write {path}: {exc.strerror}; "
                               "the previous file is unchanged") from None
    raise LoopctlError(f"cannot write {path}: no free temporary name")


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
