"""Where loopctl keeps its files (DESIGN §2).

Kept free of heavy imports: the `tick` fast path goes through here. The config
directory follows `typer.get_app_dir("loopctl")` (tested to agree) without
importing click.
"""

from __future__ import annotations

import os
import sys

from loopctl.domain.names import is_loop_name, is_run_id

TYPE_CHECKING = False  # not `typing`: ~4 ms of every cron tick

if TYPE_CHECKING:
    from pathlib import Path
    from typing import IO, Any

APP = "loopctl"
DIR_MODE = 0o700
FILE_MODE = 0o600


class Paths:
    """Where one loopctl home keeps its files. A plain class, not a
    dataclass: `dataclasses` costs the `tick` fast path several ms."""

    __slots__ = ("config_dir", "state_dir")

    def __init__(self, config_dir: Path, state_dir: Path) -> None:
        self.config_dir = config_dir
        self.state_dir = state_dir

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Paths) and (self.config_dir, self.state_dir) == (
            other.config_dir, other.state_dir)

    def __repr__(self) -> str:
        return f"Paths(config_dir={self.config_dir!r}, state_dir={self.state_dir!r})"

    @property
    def loops_file(self) -> Path:
        return self.config_dir / "loops.yaml"

    @property
    def state_file(self) -> Path:
        return self.state_dir / "state.json"

    @property
    def summary_file(self) -> Path:
        return self.state_dir / "summary.json"

    @property
    def defs_cache(self) -> Path:
        return self.state_dir / "defs-cache.json"

    @property
    def store_lock(self) -> Path:
        return self.state_dir / "store.lock"

    @property
    def lease_file(self) -> Path:
        return self.state_dir / "lease.json"

    @property
    def lease_lock(self) -> Path:
        return self.state_dir / "lease.lock"

    @property
    def events_file(self) -> Path:
        return self.state_dir / "events.jsonl"

    @property
    def runs_dir(self) -> Path:
        return self.state_dir / "runs"

    def loop_runs_dir(self, loop: str) -> Path:
        """`runs/<loop>`; a name that could leave that folder is refused."""
        if not is_loop_name(loop):
            raise _bad_component("loop name", loop)
        return self.runs_dir / loop

    def run_file(self, loop: str, run_id: str, suffix: str) -> Path:
        if not is_run_id(run_id):
            raise _bad_component("run id", run_id)
        return self.loop_runs_dir(loop) / f"{run_id}{suffix}"

    def run_log(self, loop: str, run_id: str) -> Path:
        return self.run_file(loop, run_id, ".log")

    def run_record(self, loop: str, run_id: str) -> Path:
        return self.run_file(loop, run_id, ".json")

    def unsaved_marker(self, loop: str, run_id: str) -> Path:
        return self.run_file(loop, run_id, ".unsaved")

    def decision_dir(self, loop: str, run_id: str) -> Path:
        """`decisions/<loop>/<run-id>/`: the one folder of loopctl's the run's
        agent may write (its decision; the sandbox makes it writable), kept
        apart from the run folder, which only loopctl writes (DESIGN §14).
        Made by the supervisor before the agent starts, removed after."""
        if not is_run_id(run_id):
            raise _bad_component("run id", run_id)
        if not is_loop_name(loop):
            raise _bad_component("loop name", loop)
        return self.state_dir / "decisions" / loop / run_id

    def decision_file(self, loop: str, run_id: str) -> Path:
        return self.decision_dir(loop, run_id) / "decision.json"

    def run_index(self, loop: str) -> Path:
        """`run-index/<loop>.json`: the run ids loopctl recorded for `loop`,
        oldest first. `history`, `logs` and pruning trust it, never a
        listing of the run folder something else could have planted into."""
        return self.state_dir / "run-index" / f"{self.loop_runs_dir(loop).name}.json"


def _bad_component(what: str, value: str) -> Exception:
    from loopctl.domain.errors import UsageError

    shown = repr(value) if len(value) <= 80 else repr(value[:77] + "...")
    example = "ci-watch" if what == "loop name" else "20261130T031500Z-0007"
    return UsageError(f"bad {what} {shown}: expected one like {example}")


def real_dir(path: Path) -> Path:
    """`path` as a directory of loopctl's own: created private if missing,
    refused if it is a symlink or not a directory (a symlink planted there
    would send run files, or an `rm`, somewhere else)."""
    import stat

    from loopctl.domain.errors import LoopctlError

    ensure_dir(path.parent)
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        pass
    except OSError as exc:
        raise LoopctlError(f"cannot create {path}: {exc.strerror}") from None
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode) or not stat.S_ISDIR(mode):
        raise LoopctlError(f"{path} is a symlink or not a directory; loopctl keeps run "
                           "files only in a directory of its own: remove it")
    return path


def roots() -> tuple[str, str]:
    """(config dir, state dir) as strings; os.path only, for the fast path."""
    home = os.environ.get("LOOPCTL_HOME")
    if home:
        root = os.path.abspath(os.path.expanduser(home))
        return root, os.path.join(root, "state")
    user = os.path.expanduser("~")
    if sys.platform == "darwin":
        base = os.path.join(user, "Library", "Application Support", APP)
        return base, os.path.join(base, "state")
    if sys.platform.startswith("win"):
        base = os.path.join(os.environ.get("APPDATA") or user, "Loopctl")
        return base, os.path.join(base, "state")
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(user, ".config")
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(user, ".local", "state")
    return os.path.join(config, APP), os.path.join(state, APP)


def resolve() -> Paths:
    from pathlib import Path

    config_dir, state_dir = roots()
    return Paths(config_dir=Path(config_dir), state_dir=Path(state_dir))


def file_signature(path: str | Path) -> list[int] | None:
    """Cheap identity of a file's content version: changes on every rewrite."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return [st.st_mtime_ns, st.st_size, st.st_ino]


def read_bounded(path: str | Path, limit: int) -> bytes | None:
    """At most `limit` bytes of a regular file, never through a symlink, and
    never blocking on a FIFO planted under the name; None otherwise."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        # Checked on the descriptor, before anything reads.
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, size = [], 0
        while size <= limit and (chunk := os.read(fd, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= limit else None


def read_summary(path: str | Path) -> dict[str, Any] | None:
    """`summary.json` (store.py writes it), or None when it is missing, odd or
    not a small regular file. Here, not in the store: the `tick` fast path
    reads it and must not import the store."""
    from loopctl.storage import flatjson

    data = read_bounded(path, 4096)
    try:
        return flatjson.parse(data.decode()) if data else None
    except UnicodeDecodeError:
        return None


def unnamed_file(folder: str | Path) -> IO[bytes]:
    """A private read-write file in `folder` that has no name, so nothing
    else can open it and it is gone when closed (O_TMPFILE; tempfile's
    import costs a run ~5 ms where that is missing)."""
    flag = getattr(os, "O_TMPFILE", 0)
    if flag:
        try:
            return os.fdopen(os.open(folder, flag | os.O_RDWR | os.O_CLOEXEC, FILE_MODE), "w+b")
        except OSError:
            pass  # a file system without O_TMPFILE
    import tempfile

    return tempfile.TemporaryFile(dir=folder)


def ensure_dir(path: Path) -> Path:
    """Create `path` (and parents) private to the user."""
    if not path.is_dir():
        # One level at a time: mkdir(parents=True) would give the parents
        # the umask's mode instead of 0700.
        if not path.parent.is_dir():
            ensure_dir(path.parent)
        try:
            path.mkdir(mode=DIR_MODE)
        except FileExistsError:
            pass
    return path
