"""The only module that writes loopctl's files (DESIGN §2).

`loops.yaml` is the user's: read strictly, written only when a command was
asked to change it, and an entry that fails validation is carried through
every rewrite exactly as parsed. `state.json` is loopctl's: runtime status of
every loop. Every write is atomic (temp file, fsync, rename) and every
read-modify-write happens under one file lock (`loopctl.locks`).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loopctl import paths as paths_mod
from loopctl.errors import LoopctlError, UnreadableError
from loopctl.model import LoopDef, check_notify_urls, parse_loop
from loopctl.paths import FILE_MODE, Paths, file_signature
from loopctl.untrusted import shorten

STATE_VERSION = 1
DEFS_VERSION = 1
MAX_DEFS_BYTES = 8 * 1024 * 1024
LOCK_TIMEOUT = 60.0
TOP_KEYS = {"version", "loops", "on_attention", "notify"}

Signature = list[int] | None


_MISSING = object()  # `null:` is a key too: None cannot mean "not found"


@dataclass
class Definitions:
    """A parsed `loops.yaml`: the raw document plus what validated."""

    doc: dict[str, Any]
    loops: dict[str, LoopDef] = field(default_factory=dict)
    invalid: dict[str, str] = field(default_factory=dict)
    signature: Signature = None

    @property
    def raw_loops(self) -> dict[str, Any]:
        loops = self.doc.setdefault("loops", {})
        assert isinstance(loops, dict)
        return loops

    @property
    def names(self) -> list[str]:
        return [display_key(k) for k in self.raw_loops]

    def key(self, name: str) -> Any:
        """The key as written: a hand-written `123:` is an int in YAML,
        `true:` a bool and `null:` None; each answers to its written form."""
        if name in self.raw_loops:
            return name
        return next((k for k in self.raw_loops if display_key(k) == name), _MISSING)

    def has(self, name: str) -> bool:
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

    # -- locking -----------------------------------------------------------

    @contextmanager
    def lock(self, timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
        from loopctl.locks import locked

        paths_mod.ensure_dir(self.paths.state_dir)
        with locked(self.paths.store_lock, timeout, f"{self.paths.store_lock} is held by "
                    "another loopctl; try again in a moment"):
            yield

    # -- loops.yaml --------------------------------------------------------

    def read_defs(self, path: Path | None = None) -> Definitions:
        path = path or self.paths.loops_file
        signature = file_signature(path)
        if signature is None:
            return Definitions(doc={"version": DEFS_VERSION, "loops": {}})
        doc = load_yaml_doc(path)
        defs = Definitions(doc=doc, signature=signature)
        for key, raw in defs.raw_loops.items():
            name = display_key(key)
            try:
                defs.loops[name] = parse_loop(key, raw)
            except LoopctlError as exc:
                line = _line_of(path, f"{name}:")
                defs.invalid[name] = exc.message + (f" (line {line})" if line else "")
        return defs

    def write_defs(self, defs: Definitions) -> None:
        text = dump_yaml_doc(defs.doc)
        paths_mod.ensure_dir(self.paths.config_dir)
        atomic_write(self.paths.loops_file, text.encode())
        defs.signature = file_signature(self.paths.loops_file)

    # -- state.json --------------------------------------------------------

    def read_state(self) -> dict[str, Any]:
        from loopctl.state import repair_all

        state = read_state_file(self.paths.state_file)
        state["loops"], self.repairs = repair_all(state["loops"])
        return state

    def write_state(self, state: dict[str, Any]) -> None:
        from loopctl import clock
        from loopctl.state import summarize

        summarize(state)
        # The tick fast path compares this with now: a clock set back must
        # not leave loops waiting on due times from the future.
        state["saved_at"] = clock.now()
        paths_mod.ensure_dir(self.paths.state_dir)
        atomic_write(self.paths.state_file, strict_json(state).encode())

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


def strict_json(data: Any, indent: int | None = None) -> str:
    """JSON that every parser accepts: NaN and infinities are refused, never
    written (they would make the file unreadable to `jq` and browsers)."""
    try:
        return json.dumps(data, sort_keys=True, allow_nan=False, indent=indent,
                          separators=None if indent else (",", ":"))
    except ValueError as exc:
        raise LoopctlError(f"refusing to write a non-finite number ({exc}); "
                           "the previous file is unchanged") from None


def read_state_file(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return empty_state()
    except OSError as exc:
        raise UnreadableError(f"{path}: cannot read state: {exc.strerror}") from None
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


def parse_yaml_text(text: str, where: str) -> Any:
    import yaml

    try:
        return yaml.load(text, Loader=_strict_loader())  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        line = f", line {mark.line + 1}" if mark is not None else ""
        raise UnreadableError(f"{where}{line}: not valid YAML: {problem}") from None
    except (ValueError, KeyError, AttributeError, TypeError, RecursionError) as exc:
        # The safe constructors raise these for values like `2026-02-30` or
        # `!!int x`; they are still a broken file, not a crash.
        raise UnreadableError(f"{where}: not valid YAML: bad value "
                              f"({type(exc).__name__}: {exc})") from None


def load_yaml_doc(path: Path) -> dict[str, Any]:
    """Read `loops.yaml`, failing closed (exit 3) with the path and line."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_DEFS_BYTES + 1)
    except OSError as exc:
        raise UnreadableError(f"{path}: cannot read: {exc.strerror}") from None
    if len(data) > MAX_DEFS_BYTES:
        raise UnreadableError(f"{path}: larger than {MAX_DEFS_BYTES // 2**20} MiB; "
                              "expected a loops.yaml")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UnreadableError(f"{path}, line {line}: not UTF-8 text; expected YAML") from None
    if not text.strip():
        raise UnreadableError(f"{path}: empty; expected 'version: 1' and 'loops:'")
    doc = parse_yaml_text(text, str(path))
    if not isinstance(doc, dict):
        raise UnreadableError(f"{path}, line 1: expected a mapping with 'version' and "
                              f"'loops', got {type(doc).__name__}")
    if doc.get("version") != DEFS_VERSION:
        line = _line_of(path, "version:") or 1
        raise UnreadableError(f"{path}, line {line}: unknown version "
                              f"{doc.get('version')!r}; expected version: {DEFS_VERSION}")
    unknown = sorted(str(k) for k in doc if k not in TOP_KEYS)
    if unknown:
        line = _line_of(path, f"{unknown[0]}:") or 1
        raise UnreadableError(f"{path}, line {line}: unknown top-level key {unknown[0]!r}; "
                              "expected version, loops, on_attention, notify")
    loops = doc.get("loops")
    if loops is None:
        doc["loops"] = {}
    elif not isinstance(loops, dict):
        line = _line_of(path, "loops:") or 1
        raise UnreadableError(f"{path}, line {line}: 'loops' must be a mapping of "
                              "loop names to definitions")
    hook = doc.get("on_attention")
    if hook is not None and not isinstance(hook, str):
        line = _line_of(path, "on_attention:") or 1
        raise UnreadableError(f"{path}, line {line}: 'on_attention' must be a path")
    try:
        check_notify_urls(doc.get("notify"), "top level")
    except LoopctlError as exc:
        line = _line_of(path, "notify:") or 1
        raise UnreadableError(f"{path}, line {line}: {exc.message}") from None
    return doc


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
    return ("# loopctl loop definitions; see `loopctl start --help` for the keys\n"
            + dump_yaml(doc))


# -- atomic files ----------------------------------------------------------


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so a reader sees the old or the new file,
    whole, whatever happens to this process (SIGKILL, full disk)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
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
    _fsync_dir(path.parent)


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
