"""Shared fixtures: every test gets its own LOOPCTL_HOME and HOME, and a test
that touches the real user's loopctl files fails."""

from __future__ import annotations

import getpass
import json
import os
import shlex
import stat
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
# loopctl's own folders: every entry in them, at any depth, never following
# a symlink. Nothing in them may be added, removed, rewritten or have its mode
# changed by a test.
def own_places(home: Path) -> list[Path]:
    return [home / ".config" / "loopctl", home / ".local" / "state" / "loopctl"]


# Folders other programs write too, and the names loopctl could create in
# them (a path wrongly derived from the real HOME, an export installed by
# hand): only those are watched, so another program's file there fails no test.
def near_places(home: Path) -> dict[Path, tuple[str, ...]]:
    return {home / ".config": ("loopctl*",), home / ".local" / "state": ("loopctl*",),
            home / ".config" / "systemd" / "user": ("loopctl-*.service", "loopctl-*.timer")}


# The user's crontab (`loopctl cron install` edits it), where Debian's and
# Red Hat's cron keep it: only its loopctl lines (loopctl.integrations.crontab
# MARKER) are watched, so a crontab edit elsewhere fails no test. Reading the
# spool usually needs root: best effort.
# Another process on the machine (a user's own `loopctl cron install`) may
# edit that crontab while a test runs: the suite reaches it only through the
# `crontab` program on its PATH, which a shim in front of the real one logs
# (crontab_shim), so a change with no call of this test's is reported as made
# outside the suite (a warning), not blamed on the test. GUARD_CRONTABS
# (os.pathsep-separated) stands in for the spool: the guard's own tests.
REAL_CRONTABS = ([Path(p) for p in os.environ["GUARD_CRONTABS"].split(os.pathsep)]
                 if os.environ.get("GUARD_CRONTABS") else
                 [Path(spool) / getpass.getuser()
                  for spool in ("/var/spool/cron/crontabs", "/var/spool/cron")])
CRON_MARKER = "# loopctl tick for"
CRON_KEY = " (loopctl lines)"
REAL_OWN_PLACES, REAL_NEAR_PLACES = own_places(REAL_HOME), near_places(REAL_HOME)


def pytest_configure(config: pytest.Config) -> None:
    """Compile loopctl's modules once, before any test starts it. Every test
    runs `loopctl` as a fresh process several times; an editable install
    under PYTHONDONTWRITEBYTECODE (as on CI machines) has no .pyc files, and
    then each of those processes compiles ~25 modules again (~45 ms of CPU).
    py_compile writes them whatever that variable says; imports only read."""
    leave_hypothesis_unrewritten(config)
    load_hypothesis_profile()
    if not hasattr(config, "workerinput"):  # the xdist controller, or a plain run
        import compileall

        compileall.compile_dir(str(TESTS.parent / "loopctl"), quiet=1)
        rewrite_test_modules_once(config)


# How fast hypothesis draws an input says nothing about loopctl, and CI runs
# eight workers on two cores: a draw slowed by its neighbours failed the
# too_slow health check once. A test naming its own suppress_health_check
# list replaces this one, so each of those lists too_slow as well.
SLOW_DRAWS_ARE_FINE = "loopctl-suite"


def load_hypothesis_profile() -> None:
    from hypothesis import HealthCheck, settings

    settings.register_profile(SLOW_DRAWS_ARE_FINE, deadline=None,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile(SLOW_DRAWS_ARE_FINE)


def leave_hypothesis_unrewritten(config: pytest.Config) -> None:
    """pytest rewrites the asserts of every module of a plugin's package, so
    the ~75 modules of `hypothesis` that a test module imports were rewritten
    in each xdist worker and in the controller (its plugin imports them for
    the summary): under PYTHONDONTWRITEBYTECODE that rewrite is cached
    nowhere, ~0.7 s of CPU per process, every run. Hypothesis's own asserts
    need no rewriting: no test of ours asserts through them. Our test
    modules and conftests are rewritten as before. A private attribute of
    pytest's hook: if it changes, hypothesis is rewritten as it was."""
    marked = getattr(config.pluginmanager.rewrite_hook, "_must_rewrite", None)
    cache = getattr(config.pluginmanager.rewrite_hook, "_marked_for_rewrite_cache", None)
    if isinstance(marked, set) and isinstance(cache, dict):
        marked.discard("hypothesis")
        cache.clear()


def rewrite_test_modules_once(config: pytest.Config) -> None:
    """Under PYTHONDONTWRITEBYTECODE pytest keeps no rewritten test modules,
    so every xdist worker rewrites the asserts of all ~70 test files itself
    (~5.5 s of CPU each). Rewriting them once here, two files at a time, and
    caching them as pytest would lets the workers only read. This uses
    pytest's private helpers: if they change, the workers rewrite as before."""
    try:
        from _pytest.assertion.rewrite import (
            PYC_TAIL,
            _read_pyc,
            _rewrite_test,
            _write_pyc,
            assertstate_key,
            get_cache_dir,
            try_makedirs,
        )
    except ImportError:
        return
    state = config.stash.get(assertstate_key, None)
    if state is None:  # --assert=plain: nothing is rewritten
        return

    def rewrite(files: list[Path]) -> None:
        for fn in files:
            pyc = get_cache_dir(fn) / (fn.name[:-3] + PYC_TAIL)
            if _read_pyc(fn, pyc) is not None or not try_makedirs(pyc.parent):
                continue
            try:
                source_hash, code = _rewrite_test(fn, config)
            except SyntaxError:  # collection reports it, as it would have
                continue
            _write_pyc(state, code, source_hash, pyc)

    def rewrite_quietly(files: list[Path]) -> None:
        try:
            rewrite(files)
        except Exception:  # only a speed-up: the workers rewrite what is left
            pass

    files = sorted(TESTS.rglob("test_*.py")) + sorted(TESTS.rglob("conftest.py"))
    pid = os.fork()  # the other core takes every second file
    if pid == 0:
        try:
            rewrite_quietly(files[1::2])
        finally:
            os._exit(0)
    rewrite_quietly(files[0::2])
    os.waitpid(pid, 0)


@pytest.hookimpl(trylast=True)  # after pytest-randomly's shuffle
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that mostly wait on the wall clock (`waits_on_wall_clock`), then
    the long ones (`slow`, the real agent CLIs), go at the head of the
    workers' shares, spread across them, so each starts at once and its wait
    overlaps the CPU-bound rest. Last in a random order, the real-cron
    test's minute and more was the suite's tail, with one worker busy and
    the cores idle; all at the head of one share, the long ones ran one
    after the other on that worker (the kill storm started 138 s into a
    185 s run, 2026-12-06)."""
    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("waits_on_wall_clock") is not None:
            return 0
        long = item.get_closest_marker("slow") is not None \
            or item.path.parent.name == "e2e"
        return 1 if long else 2

    ranked = [[item for item in items if rank(item) == r] for r in range(3)]
    items[:] = spread_heads(ranked[0], ranked[1], ranked[2])


def share_sizes(total: int, workers: int) -> list[int]:
    """How xdist's worksteal cuts the collection at the start: each idle
    worker in turn takes len(pending) // workers-left of what is pending,
    a contiguous block it runs from its head (stealing takes from the tail)."""
    sizes, left = [], total
    for i in range(workers):
        sizes.append(left // (workers - i))
        left -= sizes[-1]
    return sizes


def spread_heads(waits: list[pytest.Item], longs: list[pytest.Item],
                 rest: list[pytest.Item]) -> list[pytest.Item]:
    """Each share starts with its heads: the waits one per share from the
    first, the long ones in turn over the shares after those (a worker
    sitting out a wait runs nothing else meanwhile); `rest` fills the
    shares in its order."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if workers < 2:
        return waits + longs + rest
    sizes = share_sizes(len(waits) + len(longs) + len(rest), workers)
    shares: list[list[pytest.Item]] = [[] for _ in sizes]
    for n, item in enumerate(waits):
        shares[n % workers].append(item)
    free = list(range(len(waits), workers)) or list(range(workers))
    for n, item in enumerate(longs):
        shares[free[n % len(free)]].append(item)
    out: list[pytest.Item] = []
    for share, size in zip(shares, sizes, strict=True):
        filler = max(0, size - len(share))
        out += share + rest[:filler]
        rest = rest[filler:]
    return out + rest


def _entry(path: str) -> tuple[Any, ...]:
    """What an entry is: its type and mode, and a file's bytes (by hash) or
    a symlink's target. A rewrite of the same size within the same second
    still changes the hash; the mtime alone would not say so."""
    import hashlib

    try:
        info = os.lstat(path)
    except OSError as exc:  # gone, or in a folder this user may not search
        return ("gone", exc.errno)
    if stat.S_ISLNK(info.st_mode):
        return ("symlink", os.readlink(path))
    if not stat.S_ISREG(info.st_mode):
        return ("other", info.st_mode)
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    except OSError as exc:  # unreadable: its mode and size still say something
        return ("file", info.st_mode, info.st_size, exc.errno)
    return ("file", info.st_mode, digest.hexdigest())


def _fingerprint(own: list[Path], near: dict[Path, tuple[str, ...]],
                 crontabs: list[Path] | None = None) -> dict[str, Any]:
    """Every entry under `own` (recursively, never following a symlink), the
    entries directly in each `near` place whose names match its patterns,
    each with `_entry`, and each crontab's loopctl lines; a missing own
    place is None."""
    import fnmatch

    out: dict[str, Any] = {}
    for place in own:
        if not os.path.isdir(place):
            out[str(place)] = None if not os.path.lexists(place) else _entry(str(place))
            continue
        out[str(place)] = _entry(str(place)) if os.path.islink(place) else "dir"
        for top, dirs, files in os.walk(place):
            for name in dirs + files:
                out[os.path.join(top, name)] = _entry(os.path.join(top, name))
    for place, patterns in near.items():
        try:
            names = os.listdir(place)
        except OSError:  # missing or unreadable: what loopctl adds shows later
            continue
        for name in names:
            if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns):
                out[os.path.join(place, name)] = _entry(os.path.join(place, name))
    for crontab in crontabs or []:
        out[f"{crontab}{CRON_KEY}"] = _loopctl_lines(crontab)
    return out


def _loopctl_lines(crontab: Path) -> Any:
    try:
        text = crontab.read_bytes().decode(errors="replace")
    except FileNotFoundError:  # no crontab holds no loopctl line
        return []
    except OSError as exc:  # the spool usually needs root
        return ("unread", exc.errno)
    return [line for line in text.splitlines() if CRON_MARKER in line]


def real_home_fingerprint() -> dict[str, Any]:
    return _fingerprint(REAL_OWN_PLACES, REAL_NEAR_PLACES, REAL_CRONTABS)


# What a developer may have installed that a test must never run: every
# agent CLI loopctl has a preset for (except `sh`, the shell preset's) and the
# GitHub CLI. Tests that want one put a fake (tests/bin, tests/workspace) or
# the pinned real ones ($LOOPCTL_E2E_BIN, the e2e tests) first on PATH.
HIDDEN_TOOLS = frozenset({"aider", "amp", "claude", "codex", "copilot", "crush", "cursor-agent",
                          "gemini", "goose", "opencode", "pi", "qwen", "gh"})


def controlled_path(path: str, shadows: Path, hidden: frozenset[str] = HIDDEN_TOOLS) -> str:
    """`path` with every folder holding a hidden tool replaced by a shadow
    folder of symlinks to everything else in it: /usr/bin keeps git and sh
    when it also holds the developer's gh or claude."""
    out = []
    for index, folder in enumerate(path.split(os.pathsep)):
        try:
            names = set(os.listdir(folder)) if folder else set()
        except OSError:
            names = set()
        if not names & hidden:
            out.append(folder)
            continue
        shadow = shadows / str(index)
        shadow.mkdir(parents=True, exist_ok=True)
        for name in sorted(names - hidden):
            if not os.path.lexists(shadow / name):
                os.symlink(os.path.join(folder, name), shadow / name)
        out.append(str(shadow))
    return os.pathsep.join(out)


def crontab_shim(folder: Path, path: str) -> Path | None:
    """A `crontab` that notes each call (in the returned log) and runs the
    real one found on `path`; None when there is none."""
    import shutil

    real = shutil.which("crontab", path=path)
    if real is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "calls.log"
    log.touch()
    shim = folder / "crontab"
    shim.write_text(f'#!/bin/sh\necho "$$ $*" >> {shlex.quote(str(log))}\n'
                    f'exec {shlex.quote(real)} "$@"\n')
    shim.chmod(0o755)
    return log


@pytest.fixture(scope="session")
def guarded_tools(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path | None]:
    """The PATH every test starts with (see HIDDEN_TOOLS), a logging
    `crontab` first, and that log."""
    path = controlled_path(os.environ.get("PATH", os.defpath),
                           tmp_path_factory.mktemp("path-shadows"))
    folder = tmp_path_factory.mktemp("crontab-shim")
    log = crontab_shim(folder, path)
    return (f"{folder}{os.pathsep}{path}" if log else path), log


@pytest.fixture(scope="session")
def test_path(guarded_tools: tuple[str, Path | None]) -> str:
    return guarded_tools[0]


def crontab_calls(log: Path | None) -> int:
    return log.stat().st_size if log is not None and log.exists() else 0


def made_outside(changed: list[str], calls_before: int, log: Path | None) -> list[str]:
    """The crontab changes no `crontab` call of this test's can have made."""
    if crontab_calls(log) != calls_before:
        return []
    return [key for key in changed if key.endswith(CRON_KEY)]


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, test_path: str,
         guarded_tools: tuple[str, Path | None]) -> Iterator[Path]:
    """A private LOOPCTL_HOME (and HOME/XDG dirs) for this test, and a PATH
    that finds none of the developer's agent CLIs or gh."""
    before = real_home_fingerprint()
    calls = crontab_calls(guarded_tools[1])
    loop_home = tmp_path / "loopctl-home"
    fake_home = tmp_path / "user-home"
    fake_home.mkdir()
    monkeypatch.setenv("LOOPCTL_HOME", str(loop_home))
    monkeypatch.setenv("HOME", str(fake_home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(fake_home / ".config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(fake_home / ".local" / "state"))
    monkeypatch.setenv("PATH", test_path)
    # Nor the machine's /etc/gitconfig (a `commit.gpgsign`, a hooksPath).
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("LOOPCTL_KILL_GRACE", "2")
    monkeypatch.delenv("LOOPCTL_CLOCK_OFFSET", raising=False)
    monkeypatch.delenv("LOOPCTL_DECISION_FILE", raising=False)
    monkeypatch.delenv("LOOPCTL_LEASE_TTL", raising=False)
    yield loop_home
    after = real_home_fingerprint()
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    if outside := made_outside(changed, calls, guarded_tools[1]):
        import warnings

        warnings.warn(f"changed outside the test suite (no crontab call from this test) while "
                      f"it ran, not blamed on it: {outside}", stacklevel=1)
        changed = [key for key in changed if key not in outside]
    assert not changed, f"a test touched the real home directory: {changed}"


def _installed_script() -> list[str]:
    """The `loopctl` the install put beside this interpreter, run by it, when
    it is loopctl/__main__.py as the package has it now (an editable
    install's copy goes stale only if that file changes): what a user runs,
    and without `-m`'s runpy (~2.5 ms of CPU per process, over the suite's
    ~2,500 processes). Else `python -m loopctl`."""
    script = Path(sys.executable).with_name("loopctl")
    source = TESTS.parent / "loopctl" / "__main__.py"
    try:
        same = script.read_text().split("\n", 1)[1] == source.read_text().split("\n", 1)[1]
    except (OSError, IndexError, UnicodeDecodeError):
        same = False
    return [sys.executable, str(script)] if same else [sys.executable, "-m", "loopctl"]


LOOPCTL = _installed_script()


def loopctl_argv(*args: str) -> list[str]:
    return [*LOOPCTL, *args]


def imported_modules(*args: str) -> list[str]:
    """Every module `loopctl ARGS` imports, as a process (`-X importtime`);
    the command must exit 0."""
    argv = loopctl_argv(*args)
    proc = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
            if line.startswith("import time:") and "|" in line]


def agent_command(*args: str) -> str:
    """A `--command` that runs the fake agent with `args`."""
    return shlex.join([sys.executable, str(FAKE_AGENT), *args])


def in_process(*args: str) -> subprocess.CompletedProcess[str]:
    """`loopctl ARGS` through the console script's own entry point
    (`loopctl.entry.main`: the environment check, the direct paths, Typer),
    in this process, its exit code, stdout and stderr captured as a real
    process's would be. What it saves is the interpreter's start and
    loopctl's imports (~0.15 s of CPU per call)."""
    import contextlib
    import gc
    import io

    from loopctl.entry import main

    out, err = io.BytesIO(), io.BytesIO()
    streams = [io.TextIOWrapper(b, encoding="utf-8", write_through=True) for b in (out, err)]
    argv, sys.argv = sys.argv, ["loopctl", *args]
    code: Any = 0
    try:
        with contextlib.redirect_stdout(streams[0]), contextlib.redirect_stderr(streams[1]):
            main()
    except SystemExit as exc:
        code = exc.code
    finally:
        sys.argv = argv
        gc.enable()  # a command leaves the collector off (loopctl.entry); a worker lives on
    if isinstance(code, str):  # sys.exit("message"), as the interpreter would print it
        err.write(code.encode() + b"\n")
        code = 1
    return subprocess.CompletedProcess(["loopctl", *args], code or 0,
                                       out.getvalue().decode(), err.getvalue().decode())


# Commands that only read or edit loopctl's files: nothing forked, no signal
# handler set, nothing sent. The drivers (tick, run, daemon), `decide` (the
# agent's side), `watch`, `cron`, notifications and `stop --kill` are always
# real processes. (`start --notify URL` only checks and stores the URL;
# `doctor --notify` and `digest --notify` send.)
IN_PROCESS = {"start", "update", "ls", "list", "status", "show", "pause", "resume", "stop",
              "rm", "validate", "history", "agents", "events", "export", "logs", "doctor",
              "trigger", "notes", "digest"}
ALWAYS_A_PROCESS = {"--kill", "-f", "--follow", "--help", "-h"}
SENDS_WITH_NOTIFY = {"doctor", "digest"}
# Read once per process (the C library's local time, which `time.localtime`
# renders with, takes `TZ` at start-up): a test that sets them for one command
# gets a process.
PER_PROCESS_ENV = {"TZ"}


def runs_in_process(args: tuple[str, ...]) -> bool:
    if not args or args[0] not in IN_PROCESS or ALWAYS_A_PROCESS.intersection(args):
        return False
    sends = any(a == "--notify" or a.startswith("--notify=") for a in args)
    return not (args[0] in SENDS_WITH_NOTIFY and sends)


def loopctl_at(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`loopctl ARGS` against `home` (NO_COLOR), for a fixture that builds a
    home once per module and worker, before any test's own home exists:
    through the entry point in this process where `runs_in_process` allows
    (a `start`: ~0.1 s of CPU less), else as a process (`run`)."""
    env = {"LOOPCTL_HOME": str(home), "NO_COLOR": "1"}
    if runs_in_process(args):
        with pytest.MonkeyPatch.context() as patch:
            for key, value in env.items():
                patch.setenv(key, value)
            return in_process(*args)
    return subprocess.run(loopctl_argv(*args), capture_output=True, text=True,
                          env=dict(os.environ, **env), timeout=60)


class CLI:
    """Runs `loopctl` against the test's home. The drivers and everything
    that signals, forks or sends are real processes; commands that only read
    or edit loopctl's files (IN_PROCESS) run through the same entry point in
    this process (`in_process`, under the test's `env` on top of
    os.environ), unless the test has the `real_processes` mark or passes
    `input`. Where the CLI's behaviour as a process is the subject, the test
    (or the module) has the mark."""

    def __init__(self, home: Path, real_processes: bool = False) -> None:
        self.home = home
        self.real_processes = real_processes

    def __call__(self, *args: str, env: dict[str, str] | None = None,
                 timeout: float = 60, check: int | None = None,
                 input: str | None = None) -> subprocess.CompletedProcess[str]:
        if runs_in_process(args) and input is None and not self.real_processes \
                and not PER_PROCESS_ENV.intersection(env or {}):
            with pytest.MonkeyPatch.context() as patch:  # as the child's environment would be
                for key, value in (env or {}).items():
                    patch.setenv(key, value)
                proc = in_process(*args)
        else:
            full_env = dict(os.environ, **(env or {}))
            proc = subprocess.run(loopctl_argv(*args), capture_output=True, text=True,
                                  env=full_env, timeout=timeout, input=input)
        if check is not None:
            assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
        from actionlint_support import check_export

        check_export(args, proc)  # every GitHub workflow a test makes passes actionlint
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
        """state.json as loopctl reads it: every entry with every field
        (on disk each leaves out the fields at their common value)."""
        from loopctl.storage.statefile import read_state_file

        return read_state_file(self.state_dir / "state.json")

    def records(self, loop: str) -> list[dict[str, Any]]:
        folder = self.state_dir / "runs" / loop
        if not folder.is_dir():
            return []
        return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))
                if not p.name.endswith(".decision.json")]


@pytest.fixture
def cli(home: Path, request: pytest.FixtureRequest) -> CLI:
    return CLI(home, real_processes=request.node.get_closest_marker("real_processes") is not None)


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
