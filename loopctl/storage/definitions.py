"""`loops.yaml` as a document: reading it strictly, and extending it.

The file is the user's (DESIGN §2): read strictly, written only when a
command was asked to change it, and an entry that fails validation is
carried through every rewrite exactly as parsed. `Definitions` is one read of
it; `parse_source` checks the top level; a new loop is appended as text when
the file's end allows, so the 10,001st `start` costs what the 11th does.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from loopctl.domain import capacity
from loopctl.domain.checks import check_notify_targets, check_notify_urls
from loopctl.domain.errors import LoopctlError, UnreadableError, near_miss
from loopctl.domain.model import LoopDef, check_sandbox_mode
from loopctl.fast.data_class import factory, record
from loopctl.storage.yamlio import dump_yaml, parse_yaml_node, parse_yaml_text

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

DEFS_VERSION = 1
MAX_DEFS_BYTES = 8 * 1024 * 1024
TOP_KEYS = {"version", "loops", "on_attention", "notify", "notify_targets", "sandbox",
            "store", *capacity.KEYS}

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
        line = line_of(path, "version:", top=True) or 1
        raise UnreadableError(f"{where}, line {line}: unknown version "
                              f"{doc.get('version')!r}; expected version: {DEFS_VERSION}")
    unknown = sorted(str(k) for k in doc if k not in TOP_KEYS)
    if unknown:
        line = line_of(path, f"{unknown[0]}:", top=True) or 1
        raise UnreadableError(f"{where}, line {line}: unknown top-level key {unknown[0]!r}"
                              f"{near_miss(unknown[0], TOP_KEYS)}; "
                              "expected version, loops, on_attention, notify, notify_targets, "
                              "sandbox, store, max_concurrent, max_concurrent_per_agent")
    loops = doc.get("loops")
    if loops is None:
        doc["loops"] = {}
    elif not isinstance(loops, dict):
        line = line_of(path, "loops:", top=True) or 1
        raise UnreadableError(f"{where}, line {line}: 'loops' must be a mapping of "
                              "loop names to definitions")
    hook = doc.get("on_attention")
    if hook is not None and not isinstance(hook, str):
        line = line_of(path, "on_attention:", top=True) or 1
        raise UnreadableError(f"{where}, line {line}: 'on_attention' must be a path")
    try:
        check_notify_urls(doc.get("notify"), "top level")
    except LoopctlError as exc:
        line = line_of(path, "notify:", top=True) or 1
        raise UnreadableError(f"{where}, line {line}: {exc.message}") from None
    for key, check in (("notify_targets", check_notify_targets),
                       ("sandbox", check_sandbox_mode)):
        try:
            check(doc.get(key), "top level")
        except LoopctlError as exc:
            line = line_of(path, f"{key}:", top=True) or 1
            raise UnreadableError(f"{where}, line {line}: {exc.message}") from None
    _check_caps(doc, where, path)
    _check_store(doc, where, path)
    return doc, _append_indent(root, text)


def _check_store(doc: dict[str, Any], where: str, path: Path) -> None:
    """`store:` names a PostgreSQL database and holds no password (the file
    is kept in git); refused whole (exit 3): a home meant to share its state
    must not quietly fire on its own."""
    if doc.get("store") is None:
        return
    from loopctl.storage.pg.dsn import check_dsn

    line = line_of(path, "store:", top=True) or 1
    check_dsn(doc["store"], f"{where}, line {line}", in_file=True)


def _check_caps(doc: dict[str, Any], where: str, path: Path) -> None:
    """A cap that cannot be read fails the whole file closed (exit 3):
    firing without it could start every agent at once (DESIGN §18)."""
    try:
        capacity.check_caps(doc)
    except LoopctlError as exc:
        bad = next((k for k in reversed(capacity.KEYS) if k in exc.message), "max_concurrent")
        line = line_of(path, f"{bad}:", top=True) or 1
        raise UnreadableError(f"{where}, line {line}: {exc.message}") from None


def top_settings(doc: dict[str, Any]) -> dict[str, Any]:
    top = {k: doc[k] for k in ("on_attention", "notify", "notify_targets", "sandbox", "store")
           if doc.get(k) is not None}
    if "sandbox" in top:  # a bare `on` is YAML's true
        top["sandbox"] = check_sandbox_mode(top["sandbox"], "top level")
    caps = capacity.check_caps(doc)
    if doc.get("max_concurrent") is not None:
        top["max_concurrent"] = caps.total
    if caps.per_agent:
        top["max_concurrent_per_agent"] = caps.per_agent
    return top


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


def appendable_entry(defs: Definitions, name: str, raw: dict[str, Any]) -> bytes | None:
    """`name: raw` as YAML text at the file's loop indentation, if the file
    can take it at its end and it reads back exactly as `raw`."""
    # Parsed or cached alike: a hand-edited file (read fresh, its cache stale)
    # keeps its comments too.
    if defs.append_indent is None or defs.source is None \
            or (defs.parsed_doc is None and defs.cached_names is None):
        return None
    pad = " " * defs.append_indent
    text = "".join(pad + line if line.strip() else line
                   for line in dump_yaml({name: raw}).splitlines(keepends=True))
    try:
        back = parse_yaml_text("loops:\n" + text, "new entry")
    except UnreadableError:
        return None
    return text.encode() if back == {"loops": {name: raw}} else None


def line_of(path: Path, key: str, top: bool = False) -> int | None:
    """Line of the first `key` at the start of a line (error messages only);
    `top`: only unindented, so a top-level key is not found inside a loop."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    indent = "" if top else r"\s*"
    pattern = re.compile("^" + indent + r"['\"]?" + re.escape(key.rstrip(":")) + r"['\"]?\s*:",
                         re.M)
    match = pattern.search(text)
    return text.count("\n", 0, match.start()) + 1 if match else None



def key_line(path: Path, loop_line: int, message: str, raw: dict[str, object]) -> int | None:
    """The line of the key an entry's error names (`'max_run'`), within the
    entry that starts at `loop_line`; None when the error names none."""
    named = re.search(r"'([A-Za-z_]+)'", message.split(": ", 1)[-1])
    if named is None or named.group(1) not in {str(k) for k in raw}:
        return None
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    pattern = re.compile(r"\s+['\"]?" + re.escape(named.group(1)) + r"['\"]?\s*:")
    for number in range(loop_line, len(lines)):
        text = lines[number]
        if text.strip() and not text[:1].isspace():
            return None
        if pattern.match(text):
            return number + 1
    return None
