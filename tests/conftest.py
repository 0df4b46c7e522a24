"""Shared fixtures: every test gets its own LOOPCTL_HOME and HOME, and a test
that touches the real user's loopctl files fails."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).parent
FAKE_AGENT = TESTS / "fake_agent.py"
REAL_HOME = Path(os.path.expanduser("~"))
# loopctl's own folders, and the folders where any of its files could land
# if a path were derived from the real HOME (their listings must not change).
REAL_PLACES = [REAL_HOME / ".config" / "loopctl", REAL_HOME / ".local" / "state" / "loopctl",
               REAL_HOME / ".config", REAL_HOME / ".local" / "state",
               REAL_HOME / ".config" / "systemd" / "user"]


def pytest_configure(config: pytest.Config) -> None:
    """Compile loopctl's modules once, before any test starts it. Every test
    runs `loopctl` as a fresh process several times; an editable install
    under PYTHONDONTWRITEBYTECODE (as on CI machines) has no .pyc files, and
    then each of those processes compiles ~25 modules again (~45 ms of CPU).
    py_compile writes them whatever that variable says; imports only read."""
    if not hasattr(config, "workerinput"):  # the xdist controller, or a plain run
        import compileall

        compileall.compile_dir(str(TESTS.parent / "loopctl"), quiet=1)


def _fingerprint(places: list[Path]) -> list[Any]:
    out = []
    for place in places:
        try:
            out.append((str(place), sorted(os.listdir(place))))
        except FileNotFoundError:
            out.append((str(place), None))
    return out


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private LOOPCTL_HOME (and HOME/XDG dirs) for this test."""
    before = _fingerprint(REAL_PLACES)
    loop_home = tmp_path / "loopctl-home"
    fake_home = tmp_path / "user-home"
    fake_home.mkdir()
    monkeypatch.setenv("LOOPCTL_HOME", str(loop_home))
    monkeypatch.setenv("HOME", str(fake_home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(fake_home / ".config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(fake_home / ".local" / "state"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("LOOPCTL_KILL_GRACE", "2")
    monkeypatch.delenv("LOOPCTL_CLOCK_OFFSET", raising=False)
    monkeypatch.delenv("LOOPCTL_DECISION_FILE", raising=False)
    monkeypatch.delenv("LOOPCTL_LEASE_TTL", raising=False)
    yield loop_home
    assert _fingerprint(REAL_PLACES) == before, "a test touched the real home directory"


def loopctl_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "loopctl", *args]


def agent_command(*args: str) -> str:
    """A `--command` that runs the fake agent with `args`."""
    return shlex.join([sys.executable, str(FAKE_AGENT), *args])


class CLI:
    """Runs real `loopctl` processes against the test's home."""

    def __init__(self, home: Path) -> None:
        self.home = home

    def __call__(self, *args: str, env: dict[str, str] | None = None,
                 timeout: float = 60, check: int | None = None,
                 input: str | None = None) -> subprocess.CompletedProcess[str]:
        full_env = dict(os.environ, **(env or {}))
        proc = subprocess.run(loopctl_argv(*args), capture_output=True, text=True,
                              env=full_env, timeout=timeout, input=input)
        if check is not None:
            assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
        return proc

    def json(self, *args: str, env: dict[str, str] | None = None) -> Any:
        proc = self(*args, "--json", env=env)
        assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
        return json.loads(proc.stdout)

    def popen(self, *args: str, env: dict[str, str] | None = None,
              **kwargs: Any) -> subprocess.Popen[str]:
        full_env = dict(os.environ, **(env or {}))
        return subprocess.Popen(loopctl_argv(*args), env=full_env, text=True, **kwargs)

    @property
    def state_dir(self) -> Path:
        return self.home / "state"

    def state(self) -> dict[str, Any]:
        return json.loads((self.state_dir / "state.json").read_text())

    def records(self, loop: str) -> list[dict[str, Any]]:
        folder = self.state_dir / "runs" / loop
        if not folder.is_dir():
            return []
        return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))
                if not p.name.endswith(".decision.json")]


@pytest.fixture
def cli(home: Path) -> CLI:
    return CLI(home)


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0,
             interval: float = 0.05) -> Any:
    """Poll `predicate` until it is truthy; fail the test at `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


def tool(name: str) -> str:
    """A real validator (systemd-analyze, kubernetes-validate, ...) beside
    this interpreter (CI runs .venv/bin/python without the venv on PATH) or
    on PATH; skipped when missing, a failure when CI requires it."""
    import shutil

    here = os.path.dirname(sys.executable)
    found = shutil.which(name, path=here + os.pathsep + os.environ.get("PATH", ""))
    if not found:
        if os.environ.get("LOOPCTL_REQUIRE_VALIDATORS") == "1":
            pytest.fail(f"{name} is required in CI but not installed")
        pytest.skip(f"{name} not installed")
    return found
