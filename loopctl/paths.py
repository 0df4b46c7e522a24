"""Where loopctl keeps its files (DESIGN §2).

Kept free of heavy imports: the `tick` fast path goes through here. The config
directory follows `typer.get_app_dir("loopctl")` (tested to agree) without
importing click.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

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
        return self.runs_dir / loop

    def run_log(self, loop: str, run_id: str) -> Path:
        return self.loop_runs_dir(loop) / f"{run_id}.log"

    def run_record(self, loop: str, run_id: str) -> Path:
        return self.loop_runs_dir(loop) / f"{run_id}.json"

    def unsaved_marker(self, loop: str, run_id: str) -> Path:
        return self.loop_runs_dir(loop) / f"{run_id}.unsaved"

    def decision_file(self, loop: str, run_id: str) -> Path:
        return self.loop_runs_dir(loop) / f"{run_id}.decision.json"


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
