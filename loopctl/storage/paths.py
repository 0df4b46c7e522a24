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


MADE_LIMIT = 256


class Paths:
    """Where one loopctl home keeps its files. A plain class, not a
    dataclass: `dataclasses` costs the `tick` fast path several ms."""

    __slots__ = ("config_dir", "state_dir", "_made")

    def __init__(self, config_dir: Path, state_dir: Path) -> None:
        self.config_dir = config_dir
        self.state_dir = state_dir
        self._made: dict[tuple[str, ...], Path] = {}

    def _in_state(self, *parts: str) -> Path:
        """`state_dir/parts...`, joined once: a run asks for the same few
        paths dozens of times, and every pathlib join costs microseconds."""
        made = self._made.get(parts)
        if made is None:
            if len(self._made) >= MADE_LIMIT:  # a daemon's runs must not pile up here
                self._made.clear()
            made = self._made[parts] = self.state_dir.joinpath(*parts)
        return made

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Paths) and (self.config_dir, self.state_dir) == (
            other.config_dir, other.state_dir)

    def __repr__(self) -> str:
        return f"Paths(config_dir={self.config_dir!r}, state_dir={self.state_dir!r})"

    @property
    def loops_file(self) -> Path:
        made = self._made.get(("", "loops.yaml"))
        if made is None:
            made = self._made[("", "loops.yaml")] = self.config_dir / "loops.yaml"
        return made

    @property
    def state_file(self) -> Path:
        return self._in_state("state.json")

    @property
    def summary_file(self) -> Path:
        return self._in_state("summary.json")

    @property
    def defs_cache(self) -> Path:
        return self._in_state("defs-cache.json")

    @property
    def store_lock(self) -> Path:
        return self._in_state("store.lock")

    @property
    def lease_file(self) -> Path:
        return self._in_state("lease.json")

    @property
    def lease_lock(self) -> Path:
        return self._in_state("lease.lock")

    @property
    def last_tick(self) -> Path:
        return self._in_state("last-tick")

    @property
    def cron_line_file(self) -> Path:
        """The crontab line `cron install` last wrote; its mtime is when."""
        return self._in_state("cron-line")

    @property
    def events_file(self) -> Path:
        return self._in_state("events.jsonl")

    @property
    def runs_dir(self) -> Path:
        return self._in_state("runs")

    def loop_runs_dir(self, loop: str) -> Path:
        """`runs/<loop>`; a name that could leave that folder is refused."""
        if not is_loop_name(loop):
            raise _bad_component("loop name", loop)
        return self._in_state("runs", loop)

    def run_file(self, loop: str, run_id: str, suffix: str) -> Path:
        if not is_run_id(run_id):
            raise _bad_component("run id", run_id)
        self.loop_runs_dir(loop)  # refuses a name that could leave runs/
        return self._in_state("runs", loop, run_id + suffix)

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
        return self._in_state("decisions", loop, run_id)

    def decision_file(self, loop: str, run_id: str) -> Path:
        return self.decision_dir(loop, run_id) / "decision.json"

    def run_digest(self, loop: str) -> Path:
        """`run-digest/<loop>.json`: the loop's last runs in brief and its
        spend per day, what the dashboard's strips and timeline show
        (storage/run_digest.py); rebuilt from the records when missing."""
        return self._in_state("run-digest", f"{self.loop_runs_dir(loop).name}.json")

    def run_index(self, loop: str) -> Path:
        """`run-index/<loop>.json`: the run ids loopctl recorded for `loop`,
        oldest first. `history`, `logs` and pruning trust it, never a
        listing of the run folder something else could have planted into."""
        return self._in_state("run-index", f"{self.loop_runs_dir(loop).name}.json")


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


def home_env() -> dict[str, str]:
    """The environment that makes `roots()` find this same home wherever it
    runs: a scheduler's own HOME (cron's is the passwd entry's) or a shell
    profile's XDG_* must not make it read another, empty one."""
    home = os.environ.get("LOOPCTL_HOME")
    if home:
        return {"LOOPCTL_HOME": roots()[0]}
    if sys.platform == "darwin" or sys.platform.startswith("win"):
        return {"HOME": os.path.abspath(os.path.expanduser("~"))}
    config, state = roots()
    return {"XDG_CONFIG_HOME": os.path.dirname(os.path.abspath(config)),
            "XDG_STATE_HOME": os.path.dirname(os.path.abspath(state))}


def note_tick() -> None:
    """Mark that a `tick` reached this home: the mtime of `<state>/last-tick`,
    which `cron install` creates, so `doctor` can tell a crontab line that
    fires from one whose ticks land elsewhere. One syscall on the fast path,
    and nothing is created: a tick of a broken home still writes nothing."""
    try:
        os.utime(os.path.join(roots()[1], "last-tick"), follow_symlinks=False)
    except OSError:
        pass  # no mark (cron install makes it), or not ours to fix: doctor says


def make_tick_mark(path: Path) -> None:
    """`<state>/last-tick` with no tick yet (mtime 0), if it is missing."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                     | os.O_NONBLOCK | os.O_CLOEXEC, FILE_MODE)
    except FileExistsError:
        return
    os.close(fd)
    os.utime(path, (0, 0), follow_symlinks=False)


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


def owes_team(state_dir: str) -> bool:
    """Whether the home holds run records or skipped slots its team store
    has not taken yet (storage/team_outbox.py): `tick` then takes the full
    path, whose pass sends them. One failed `scandir` in a home of files."""
    try:
        with os.scandir(os.path.join(state_dir, "team-outbox")) as found:
            return any(True for _ in found)
    except OSError:
        return False


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


def read_tail(path: str | Path, limit: int) -> tuple[bytes, bool] | None:
    """The last `limit` bytes of a regular file and whether more came before
    them, with `read_bounded`'s checks. Seeks: a page showing the tail of a
    1 GiB log reads a MiB of it, not the gigabyte."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        found = os.fstat(fd)  # checked on the descriptor, before anything reads
        if not stat.S_ISREG(found.st_mode):
            return None
        start = max(0, found.st_size - limit)
        chunks, got = [], 0
        while got < limit and (chunk := os.pread(fd, limit - got, start + got)):
            chunks.append(chunk)
            got += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return b"".join(chunks), start > 0


def refuse_constant(word: str) -> Any:
    """A `parse_constant` for loopctl's own files: NaN and the infinities are
    never written there (atomic.strict_json), so reading one is damage."""
    raise ValueError(f"{word} is not a number loopctl writes")


def read_summary(path: str | Path) -> dict[str, Any] | None:
    """`summary.json` (store.py writes it), or None when it is missing, odd or
    not a small regular file. Here, not in the store: the `tick` fast path
    reads it and must not import the store."""
    data = read_bounded(path, 4096)
    if not data:
        return None
    # A process that has loaded `json` (C, ~2 us) uses it; the `tick` fast
    # path has not (its import is 25M instructions, bench/fast_pieces.py),
    # and reads the flat shape itself (~25 us).
    json = sys.modules.get("json")
    try:
        if json is not None:
            found = json.loads(data, parse_constant=refuse_constant)
            return found if isinstance(found, dict) else None
        from loopctl.fast import flatjson

        return flatjson.parse(data.decode())
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None


def current_summary(summary_file: str | Path, state_file: str | Path) -> dict[str, Any] | None:
    """The summary, if it describes the state.json there is now (the
    signature it recorded is that file's): 10,000 entries cost 50 ms to
    parse, the summary a fraction of a millisecond."""
    summary = read_summary(summary_file)
    if summary is None or summary.get("state_sig") != file_signature(state_file):
        return None
    return summary


# A clock set back by more than this: the due times saved are from the future.
CLOCK_SLACK = 5.0
YEAR_3000 = 32503680000.0


def quiet_until(summary: dict[str, Any], loops_sig: list[int] | None,
                now: float) -> tuple[float | None, bool] | None:
    """When `summary` proves that no loop needs a driver before its
    `wake_at`: that time (None: never) and whether a run is in flight.
    None when a pass must look: another `loops.yaml` than the one the
    state was reconciled with, a clock set back, a due time reached, or a
    value that is not one."""
    if summary.get("version") not in (1, 2) or summary.get("defs_sig") != loops_sig:
        return None
    saved_at = summary.get("saved_at") or 0
    if not isinstance(saved_at, (int, float)) or now < saved_at - CLOCK_SLACK:
        return None  # the clock went back: let a full pass re-arm the loops
    wake_at = summary.get("wake_at")
    if wake_at is None:
        return None, bool(summary.get("busy"))
    # Past year 3000 the summary is damaged, not a schedule: look properly.
    if not isinstance(wake_at, (int, float)) or not now < wake_at < YEAR_3000:
        return None
    return float(wake_at), bool(summary.get("busy"))


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
