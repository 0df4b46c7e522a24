"""Bad input through the real CLI (issue 2, "Must show": the table-driven test).

Two tables:

* bad command-line input: exit 2, one line on stderr naming the problem, and
  `loops.yaml` / `state.json` byte-for-byte unchanged;
* broken `loops.yaml` files: every command that needs the file exits 3 with
  one line naming the path (and the line, where there is one), the file is
  left exactly as it was, and no state is written.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import CLI, loopctl_at

# The table runs through loopctl's entry point in-process (tests/conftest.py),
# a few rows of it and every `tick` as real processes: the exit code, the one
# line on stderr and the untouched files are the same contract either way.
AS_A_PROCESS = pytest.mark.real_processes

# -- helpers -------------------------------------------------------------------


def one_line_error(proc: Any) -> str:
    """The single non-empty stderr line of a failed command."""
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {proc.stderr!r}"
    return lines[0]


def tree(home: Path) -> dict[str, bytes | None]:
    """Every file under `home` with its bytes (lock files: presence only)."""
    out: dict[str, bytes | None] = {}
    if not home.exists():
        return out
    for path in sorted(home.rglob("*")):
        if path.is_file():
            rel = str(path.relative_to(home))
            out[rel] = None if path.name.endswith(".lock") else path.read_bytes()
    return out


def without_locks(files: dict[str, bytes | None]) -> dict[str, bytes | None]:
    return {k: v for k, v in files.items() if not k.endswith(".lock")}


@pytest.fixture(scope="module")
def good_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with one good loop `good` (prompt `true`, due now), made once per
    module (and worker) by the CLI's entry point and copied into each test's
    home: a `loopctl start` per test would double this module's run time."""
    template = tmp_path_factory.mktemp("template") / "home"
    proc = loopctl_at(template, "start", "--every", "10m", "--name", "good", "true")
    assert proc.returncode == 0, proc.stderr
    return template


def install(template: Path, home: Path) -> None:
    shutil.copytree(template, home, copy_function=shutil.copy2)


# -- bad command-line input ------------------------------------------------------

LONG_NAME = "a" * 65

# (argv, fragments the one-line message must contain, case-insensitively).
# "{prompt_file}" is replaced by the path of an existing prompt file.
BAD_INPUTS = [
    # durations
    pytest.param(["start", "--every", "0", "--name", "x", "p"], ["--every", "0"],
                 id="every-zero", marks=AS_A_PROCESS),
    pytest.param(["start", "--every", "-5m", "--name", "x", "p"], ["--every", "-5m"],
                 id="every-negative"),
    pytest.param(["start", "--every", "10x", "--name", "x", "p"], ["--every", "10x"],
                 id="every-bad-unit"),
    pytest.param(["start", "--every", "1.5h", "--name", "x", "p"], ["--every", "1.5h"],
                 id="every-fraction"),
    pytest.param(["start", "--every", "1h1h", "--name", "x", "p"], ["--every", "1h1h"],
                 id="every-unit-twice"),
    pytest.param(["start", "--every", "10m", "--timeout", "0", "--name", "x", "p"],
                 ["--timeout", "0"], id="timeout-zero"),
    pytest.param(["start", "--every", "10m", "--for", "99999w", "--name", "x", "p"],
                 ["--for", "99999w"], id="for-overflow"),
    pytest.param(["start", "--every", "10m", "--after", "soon", "--name", "x", "p"],
                 ["--after", "soon"], id="after-garbage"),
    # cron
    pytest.param(["start", "--cron", "0 0 * * * *", "--name", "x", "p"],
                 ["cron", "0 0 * * * *"], id="cron-six-fields", marks=AS_A_PROCESS),
    pytest.param(["start", "--cron", "0 0 31 2 *", "--name", "x", "p"],
                 ["cron", "0 0 31 2 *"], id="cron-impossible-date"),
    pytest.param(["start", "--cron", "61 * * * *", "--name", "x", "p"],
                 ["cron", "61 * * * *"], id="cron-minute-61"),
    pytest.param(["start", "--cron", "every tuesday-ish", "--name", "x", "p"],
                 ["cron", "every tuesday-ish"], id="cron-garbage"),
    # zones
    pytest.param(["start", "--cron", "0 9 * * *", "--tz", "Mars/Olympus", "--name", "x", "p"],
                 ["Mars/Olympus"], id="tz-unknown"),
    pytest.param(["start", "--cron", "0 9 * * *", "--tz", "../etc/passwd", "--name", "x", "p"],
                 ["../etc/passwd"], id="tz-path"),
    # names
    pytest.param(["start", "--every", "10m", "--name", "../x", "p"], ["name", "../x"],
                 id="name-dotdot", marks=AS_A_PROCESS),
    pytest.param(["start", "--every", "10m", "--name", "a/b", "p"], ["name", "a/b"],
                 id="name-slash"),
    pytest.param(["start", "--every", "10m", "--name", "-x", "p"], ["name", "-x"],
                 id="name-dash"),
    pytest.param(["start", "--every", "10m", "--name", ".x", "p"], ["name", ".x"],
                 id="name-dot"),
    pytest.param(["start", "--every", "10m", "--name", "UPPER", "p"], ["name", "UPPER"],
                 id="name-upper"),
    pytest.param(["start", "--every", "10m", "--name", LONG_NAME, "p"], ["name"],
                 id="name-65-chars"),
    pytest.param(["start", "--every", "10m", "--name", "", "p"], ["name"], id="name-empty"),
    # env pairs
    pytest.param(["start", "--every", "10m", "--env", "BAD-NAME", "--name", "x", "p"],
                 ["--env", "BAD-NAME"], id="env-name-only-bad"),
    pytest.param(["start", "--every", "10m", "--env", "1BAD=x", "--name", "x", "p"],
                 ["--env", "1BAD"], id="env-bad-key", marks=AS_A_PROCESS),
    # choices
    pytest.param(["start", "--every", "10m", "--agent", "hal9000", "--name", "x", "p"],
                 ["agent", "hal9000"], id="agent-unknown", marks=AS_A_PROCESS),
    pytest.param(["start", "--every", "10m", "--overlap", "sometimes", "--name", "x", "p"],
                 ["--overlap", "sometimes"], id="overlap-unknown"),
    pytest.param(["start", "--every", "10m", "--catch-up", "all", "--name", "x", "p"],
                 ["--catch-up", "all"], id="catch-up-unknown"),
    # what and when
    pytest.param(["start", "--every", "10m", "--prompt-file", "{prompt_file}", "--name", "x",
                  "p"], ["prompt"], id="prompt-and-prompt-file"),
    pytest.param(["start", "--every", "10m", "--name", "x"], ["prompt"], id="no-prompt",
                 marks=AS_A_PROCESS),
    pytest.param(["start", "--every", "10m", "--cron", "*/5 * * * *", "--name", "x", "p"],
                 ["--every", "--cron"], id="every-and-cron"),
    pytest.param(["start", "--name", "x", "p"], ["--every"], id="no-schedule"),
    # the same checks on update
    pytest.param(["update", "good", "--every", "1.5h"], ["--every", "1.5h"],
                 id="update-every-fraction"),
    pytest.param(["update", "good", "--overlap", "sometimes"], ["--overlap"],
                 id="update-overlap-unknown"),
    pytest.param(["update", "good", "--cron", "0 0 31 2 *"], ["cron"],
                 id="update-cron-impossible"),
]


@pytest.mark.parametrize(("argv", "fragments"), BAD_INPUTS)
def test_bad_input_is_refused_and_changes_nothing(
        cli: CLI, home: Path, tmp_path: Path, good_template: Path, argv: list[str],
        fragments: list[str]) -> None:
    install(good_template, home)
    loops_file, state_file = home / "loops.yaml", home / "state" / "state.json"
    loops_before, state_before = loops_file.read_bytes(), state_file.read_bytes()
    files_before = without_locks(tree(home))

    prompt_file = tmp_path / "PROMPT.md"
    prompt_file.write_text("do the thing\n")
    args = [str(prompt_file) if a == "{prompt_file}" else a for a in argv]
    proc = cli(*args)

    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    message = one_line_error(proc)
    for fragment in fragments:
        assert fragment.lower() in message.lower(), (fragment, message)
    assert proc.stdout == ""
    assert loops_file.read_bytes() == loops_before
    assert state_file.read_bytes() == state_before
    assert without_locks(tree(home)) == files_before


@AS_A_PROCESS
def test_bad_input_on_a_fresh_home_creates_no_files(cli: CLI, home: Path) -> None:
    proc = cli("start", "--every", "0", "--name", "x", "p")
    assert proc.returncode == 2
    one_line_error(proc)
    assert not (home / "loops.yaml").exists()
    assert not (home / "state" / "state.json").exists()


# -- broken loops.yaml -------------------------------------------------------------

MARKER = "pwned-marker"


def _huge() -> bytes:
    head = b"version: 1\nloops:\n"
    line = b"# " + b"x" * 1021 + b"\n"  # 1 KiB a line
    return head + line * (8 * 1024 + 64)


def _binary() -> bytes:
    rng = random.Random(20261130)
    return b"\x00\xff\xfe" + rng.randbytes(4096) + b"\x00"


# (content, line the message must name or None). "{marker}" is replaced by a
# path that a YAML tag would create if it were ever executed.
BROKEN_FILES = [
    pytest.param(b"", None, id="empty"),
    pytest.param(b"\n\n   \n", None, id="blank"),
    pytest.param(_binary(), 1, id="binary"),
    pytest.param(_huge(), None, id="huge"),
    pytest.param(b"version: 2\nloops: {}\n", 1, id="version-2"),
    pytest.param(b"# my loops\nloops: {}\nversion: '1'\n", 3, id="version-as-text"),
    pytest.param(b"- version: 1\n- loops: {}\n", 1, id="yaml-list"),
    pytest.param(b"version: 1\nloops:\n  x: !!python/object/apply:os.system "
                 b"[\"touch {marker}\"]\n", 3, id="python-tag-in-entry"),
    pytest.param(b"!!python/object/apply:os.system [\"touch {marker}\"]\n", 1,
                 id="python-tag-document"),
    pytest.param(b"version: 1\nloops:\n  a:\n    prompt: p\n    every: 10m\n"
                 b"  a:\n    prompt: q\n    every: 10m\n", 6, id="duplicate-loop"),
    pytest.param(b"version: 1\nloops: {}\nschedules: {}\n", 3, id="unknown-top-key"),
    pytest.param(b"version: 1\nloops:\n  - a\n  - b\n", 2, id="loops-is-a-list"),
    pytest.param(b"version: 1\nloops:\n  a: [unclosed\n  b: {}\n", None, id="unparseable"),
]

START = ["start", "--every", "10m", "--name", "newloop", "p"]
# Every command on a home whose only file is the broken loops.yaml; the
# writers (start, tick) also on a home with state from an earlier good file.
BROKEN_COMMANDS = [
    pytest.param(["ls"], False, id="ls-fresh"),
    pytest.param(["validate"], False, id="validate-fresh"),
    pytest.param(START, False, id="start-fresh"),
    pytest.param(["tick"], False, id="tick-fresh"),
    pytest.param(START, True, id="start-with-state"),
    pytest.param(["tick"], True, id="tick-with-state"),
]


@pytest.mark.parametrize(("argv", "prior_state"), BROKEN_COMMANDS)
@pytest.mark.parametrize(("content", "line"), BROKEN_FILES)
def test_broken_file_fails_closed(cli: CLI, home: Path, tmp_path: Path, good_template: Path,
                                  content: bytes, line: int | None, argv: list[str],
                                  prior_state: bool) -> None:
    marker = tmp_path / MARKER
    content = content.replace(b"{marker}", str(marker).encode())
    loops_file, state_file = home / "loops.yaml", home / "state" / "state.json"
    if prior_state:
        # A good loop that is due now: a tick that ignored the broken file
        # would fire it.
        install(good_template, home)
    else:
        home.mkdir(mode=0o700)
    loops_file.write_bytes(content)
    before = without_locks(tree(home))

    proc = cli(*argv)

    assert proc.returncode == 3, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    message = one_line_error(proc)
    assert str(loops_file) in message, message
    if line is not None:
        assert f"line {line}" in message, message
    assert loops_file.read_bytes() == content, "the broken file was rewritten"
    if not prior_state:
        assert not state_file.exists(), "state was written from a broken file"
    assert without_locks(tree(home)) == before, "a file was written or removed"
    assert not (home / "state" / "runs").exists(), "something fired"
    assert not marker.exists(), "a YAML tag was executed"
