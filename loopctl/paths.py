"""Where loopctl keeps its files (DESIGN §2).

Kept free of heavy imports: the `tick` fast path goes through here. The config
directory follows `typer.get_app_dir("loopctl")` (tested to agree) without
importing click.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

APP = "loopctl"
DIR_MODE = 0o700
FILE_MODE = 0o600


@dataclass(frozen=True)
class Paths:
    config_dir: Path
    state_dir: Path

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

    def decision_file(self, loop: str, run_id: str) -> Path:
        return self.loop_runs_dir(loop) / f"{run_id}.decision.json"


def default_config_dir() -> Path:
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / APP
    if sys.platform.startswith("win"):
        base = os.environ.get("APPDATA") or str(Path.home())
        return Path(base) / "Loopctl"
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / APP


def default_state_dir() -> Path:
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / APP / "state"
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / APP


def resolve() -> Paths:
    home = os.environ.get("LOOPCTL_HOME")
    if home:
        root = Path(home).expanduser().absolute()
        return Paths(config_dir=root, state_dir=root / "state")
    return Paths(config_dir=default_config_dir(), state_dir=default_state_dir())


def file_signature(path: Path) -> list[int] | None:
    """Cheap identity of a file's content version: changes on every rewrite."""
    try:
        st = path.stat()
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
