"""`loopctl watch`: the pure view with a fixed clock, the plain snapshot when
stdout is not a terminal, and the live view in a real terminal (tmux)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import CLI, agent_command, tool, wait_for
from loopctl.cli.watch import Row, cells, cut, last_line, last_log_line, render, tail
from loopctl.domain.timestamps import iso
from loopctl.storage.store import Store

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
HOSTILE = ("first line\n\x1b[2J\x1b]0;pwned title\x07progress 10%\rvisible tail \x9b31m\n\n"
           .encode())  # \x9b: the 8-bit CSI, as UTF-8


def loop(name: str = "ci-watch", status: str = "active", **fields: Any) -> dict[str, Any]:
    """A LOOP object (README "The LOOP object") with the fields the view reads."""
    out: dict[str, Any] = {
        "name": name, "status": status, "reason": None,
        "schedule": {"text": "every 10m"}, "runs": {"used": 3, "limit": 50},
        "next_fire": iso(NOW + 240), "last_run": None, "current_run": None,
        "recent_outcomes": [],
    }
    out.update(fields)
    return out


def in_flight(started_ago: float = 65, **fields: Any) -> dict[str, Any]:
    run = {"run_id": "20270115T075855Z-0004", "started_at": iso(NOW - started_ago)}
    return loop(status="running", current_run=run, next_fire=None, **fields)


def texts(rows: list[Row], width: int = 80, **kwargs: Any) -> list[str]:
    return [line.text for line in render(rows, NOW, width, **kwargs)]


# -- the pure view ---------------------------------------------------------------------


def test_a_row_shows_status_next_fire_runs_last_outcome_and_strip() -> None:
    row = Row(loop(last_run={"run_id": "r", "outcome": "failed", "ended_at": iso(NOW - 9)},
                   recent_outcomes=["ok", "timeout", "failed"]))
    header, line = texts([row])
    assert header.split() == ["NAME", "STATUS", "NEXT", "RUNS", "LAST", "RECENT"]
    assert line.split() == ["ci-watch", "active", "in", "4m", "3/50", "failed", "oTx"]
    assert texts([row], unicode=True)[1].endswith("✓⏱✗")


def test_paused_reason_overdue_and_no_limit() -> None:
    row = Row(loop(status="paused", reason="error", next_fire=iso(NOW - 7200),
                   runs={"used": 7, "limit": None}))
    assert texts([row])[1].split() == ["ci-watch", "paused", "(error)", "overdue", "2h",
                                       "7", "-"]
    assert "7/∞" in texts([row], unicode=True)[1]


def test_status_column_is_styled_and_nothing_else() -> None:
    lines = render([Row(loop(status="paused", reason="error"))], NOW, 80)
    assert lines[0].style == "bold"
    body = lines[1]
    assert body.text[body.start:body.end] == "paused (error)"
    assert body.style == "yellow"


def test_a_run_in_flight_shows_elapsed_time_and_last_log_line() -> None:
    lines = texts([Row(in_flight(65), "compiling module 3 of 9")])
    assert lines[1].split()[:2] == ["ci-watch", "running"]
    assert lines[2] == "  > 1m5s  compiling module 3 of 9"
    assert texts([Row(in_flight(65), None)])[2] == "  > 1m5s  (no output yet)"


def test_a_hostile_log_line_is_shown_without_control_characters() -> None:
    assert last_line(HOSTILE) == "visible tail"
    lines = texts([Row(in_flight(), last_line(HOSTILE))])
    for text in lines:
        assert not re.search(r"[\x00-\x1f\x7f-\x9f]", text), repr(text)
    assert "pwned" not in "".join(lines)
    assert lines[2].startswith("  > 1m5s  visible tail")


def test_a_hostile_line_passed_in_directly_is_cleaned_too() -> None:
    lines = texts([Row(in_flight(), "a\x1b[2Jb\x1b]0;t\x07c\x07\x08d\u202ee")])
    assert lines[2] == "  > 1m5s  abcde"


def test_an_invalid_entry_shows_its_error() -> None:
    bad = {"name": "broken", "status": "invalid", "error": "bad every 'x' (line 4)"}
    lines = texts([Row(bad), Row(loop())])
    assert lines[1].split()[:2] == ["broken", "invalid"]
    assert lines[2] == "  > bad every 'x' (line 4)"
    assert lines[3].startswith("ci-watch")


@pytest.mark.parametrize("width", [80, 60, 40, 12])
@pytest.mark.parametrize("unicode", [False, True])
def test_long_names_and_lines_are_cut_to_the_width(width: int, unicode: bool) -> None:
    rows = [Row(in_flight(name="n" * 64, reason="rate_limited"), "x" * 5000),
            Row(in_flight(name="wide"), "宽" * 100),
            Row(loop(recent_outcomes=["ok"] * 10))]
    lines = texts(rows, width, unicode=unicode)
    assert all(cells(text) <= width for text in lines), [(cells(t), t) for t in lines]
    ellipsis = "…" if unicode else "..."
    assert lines[1].startswith("n") and lines[2].endswith(ellipsis)
    if width >= 64 + 2:
        # A name is an identifier: the rest of the row gives way (issue 29).
        assert lines[1].split()[0] == "n" * 64
    else:  # wider than the terminal: the line ends at its edge
        assert lines[1] == cut("n" * 64, width, ellipsis)


def test_an_error_replaces_the_table_in_a_few_lines() -> None:
    error = "/tmp/" + "d" * 90 + "/state.json: state is not valid JSON; move it aside"
    lines = render([Row(loop())], NOW, 80, error=error + "\x1b[2J")
    assert 1 < len(lines) <= 3
    assert lines[0].text.startswith("error: /tmp/ddd") and all(ln.style == "red" for ln in lines)
    assert all(cells(ln.text) <= 80 and "\x1b" not in ln.text for ln in lines)


def test_no_loops_says_how_to_start_one() -> None:
    assert texts([])[0].startswith("no loops yet")


def test_render_takes_what_ls_json_gives(cli: CLI, tmp_path: Path) -> None:
    cli("start", "p", "--name", "real", "--every", "10m", "--after", "1h", check=0)
    rows = [Row(info) for info in cli.json("ls")["loops"]]
    assert render(rows, NOW, 80)[1].text.split()[:2] == ["real", "active"]


# -- reading the log ------------------------------------------------------------------


def test_tail_reads_only_the_end_of_a_huge_log(tmp_path: Path) -> None:
    log = tmp_path / "huge.log"
    with open(log, "wb") as handle:
        try:
            handle.truncate(16 * 2**30)  # sparse: reading it all would take minutes
        except OSError:
            pytest.skip("no sparse files here")
        handle.seek(0, os.SEEK_END)
        handle.write(b"the very last line\n")
    data = tail(log)
    assert data is not None and len(data) == 4096
    assert last_line(data) == "the very last line"


def test_last_log_line_of_the_run_in_flight(home: Path) -> None:
    store = Store()
    info = in_flight(name="demo")
    folder = store.paths.loop_runs_dir("demo")
    folder.mkdir(parents=True)
    log = store.paths.run_log("demo", info["current_run"]["run_id"])
    assert last_log_line(store, info) is None  # no log yet
    log.write_bytes(HOSTILE)
    assert last_log_line(store, info) == "visible tail"
    log.unlink()
    log.symlink_to(tmp_secret := home / "secret")
    tmp_secret.write_text("do not show\n")
    assert last_log_line(store, info) is None  # never through a symlink
    assert last_log_line(store, loop(name="demo")) is None  # nothing in flight


# -- not a terminal -----------------------------------------------------------------


def test_not_a_tty_prints_one_snapshot_and_exits_0(cli: CLI) -> None:
    cli("start", "p", "--name", "alpha", "--every", "10m", "--after", "1h", check=0)
    cli("start", "p", "--name", "b" * 64, "--every", "1h", "--after", "1h", check=0)
    proc = cli("watch", timeout=15, check=0)
    lines = proc.stdout.splitlines()
    # 80 columns when not a terminal; the 64-character name whole, so the
    # other columns give way (issue 29: two names must never print alike).
    assert lines[0].split()[0] == "NAME"
    assert lines[1].split()[0] == "alpha" and lines[1].split()[1].startswith("a")
    assert lines[2].split()[0] == "b" * 64
    assert all(len(line) <= 80 for line in lines) and proc.stderr == ""
    assert "\x1b" not in proc.stdout


def test_not_a_tty_with_a_damaged_state_is_one_line_and_exit_3(cli: CLI) -> None:
    cli("start", "p", "--name", "alpha", "--every", "10m", "--after", "1h", check=0)
    (cli.state_dir / "state.json").write_text("{garbage")
    proc = cli("watch", timeout=15, check=3)
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "not valid JSON" in proc.stderr


def test_importing_watch_does_not_import_rich() -> None:
    code = "import sys, loopctl.cli.watch; print('rich' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"


# -- a real terminal (tmux) -------------------------------------------------------------


class Pane:
    """One 80x24 tmux pane on a private server (socket)."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.socket = f"loopctl-watch-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
        self.socket_path = ""
        self.width = 80

    def tmux(self, *args: str) -> str:
        proc = subprocess.run([self.binary, "-L", self.socket, "-f", "/dev/null", *args],
                              capture_output=True, text=True, timeout=10, env=self.env)
        assert proc.returncode == 0, (args, proc.stderr)
        return proc.stdout

    def start(self, script: str) -> None:
        self.tmux("new-session", "-d", "-x", str(self.width), "-y", "24", "-s", "w", "--",
                  "sh", "-c", script)
        self.socket_path = self.tmux("display-message", "-p", "#{socket_path}").strip()

    def text(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-S", "-200", "-t", "w")

    def wait(self, predicate: Callable[[str], Any], timeout: float = 8) -> str:
        try:
            return str(wait_for(lambda: predicate(text := self.text()) and text, timeout))
        except AssertionError:
            raise AssertionError(f"pane never matched; it shows:\n{self.text()}") from None

    def modes(self) -> str:
        """`stty -a` of the pane's terminal, read from outside while the watch runs."""
        tty = self.tmux("display-message", "-p", "-t", "w", "#{pane_tty}").strip()
        return subprocess.run(["stty", "-a", "-F", tty], capture_output=True, text=True,
                              check=True, timeout=10).stdout

    def kill(self) -> None:
        subprocess.run([self.binary, "-L", self.socket, "kill-server"], capture_output=True,
                       timeout=10, env=self.env)
        if self.socket_path:
            Path(self.socket_path).unlink(missing_ok=True)


@pytest.fixture
def pane() -> Iterator[Pane]:
    terminal = Pane(tool("tmux"))
    try:
        yield terminal
    finally:
        terminal.kill()


def watch_script(home: Path) -> str:
    """Run the watch; then its exit code and the terminal's modes. `trap : INT`
    keeps this shell alive through Ctrl-C (the watch itself gets SIGINT)."""
    watch = shlex.join(["env", f"LOOPCTL_HOME={home}", "NO_COLOR=1", sys.executable,
                        "-m", "loopctl", "watch", "--interval", "0.5"])
    return f"trap : INT; {watch}; echo EXIT=$?; stty -a; sleep 60"


def has_mode(stty: str, mode: str) -> bool:
    return re.search(rf"(^|\s){mode}(\s|$)", stty) is not None


def assert_restored(text: str, code: int) -> None:
    after = text.split(f"EXIT={code}", 1)[1]
    assert has_mode(after, "icanon") and has_mode(after, "echo"), after
    assert "Traceback" not in text
    assert all(len(line) <= 80 for line in text.splitlines())


def test_live_view_follows_a_run_and_q_quits(cli: CLI, home: Path, pane: Pane,
                                              tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    cli("start", "p", "--name", "watched", "--every", "1h", "--command",
        agent_command("--print", "agent-line-42", "--wait-for", str(gate)), check=0)
    try:
        cli("tick", check=0)
        pane.start(watch_script(home))
        pane.wait(lambda t: re.search(r"watched\s+running\s", t) and "agent-line-42" in t)
        stty = pane.modes()
        assert has_mode(stty, "-icanon") and has_mode(stty, "-echo"), stty  # cbreak
        gate.touch()
        pane.wait(lambda t: re.search(r"watched\s+active\s+in \S+\s+1/50\s+ok\s+o\n", t))
        pane.tmux("send-keys", "-t", "w", "q")
        text = pane.wait(lambda t: "EXIT=0" in t and has_mode(t, "icanon"), timeout=5)
        assert_restored(text, 0)
    finally:
        gate.touch()


def test_ctrl_c_exits_130_without_a_traceback(cli: CLI, home: Path, pane: Pane) -> None:
    cli("start", "p", "--name", "calm", "--every", "10m", "--after", "1h", check=0)
    pane.start(watch_script(home))
    pane.wait(lambda t: re.search(r"calm\s+active\s+in 5\dm", t))
    pane.tmux("send-keys", "-t", "w", "C-c")
    text = pane.wait(lambda t: "EXIT=130" in t and has_mode(t, "icanon"), timeout=5)
    assert_restored(text, 130)


@pytest.mark.parametrize("damaged, garbage, shown", [
    ("state/state.json", "{garbage", "not valid JSON"),
    ("loops.yaml", "version: 1\nloops: [unclosed\n", "not valid YAML"),
])
def test_a_damaged_file_shows_an_error_and_the_watch_keeps_going(
        cli: CLI, home: Path, pane: Pane, damaged: str, garbage: str, shown: str) -> None:
    cli("start", "p", "--name", "sturdy", "--every", "10m", "--after", "1h", check=0)
    cli("tick", check=0)  # state.json exists from here on
    target = home / damaged
    original = target.read_bytes()
    pane.start(watch_script(home))
    pane.wait(lambda t: re.search(r"sturdy\s+active", t))
    target.write_text(garbage)
    pane.wait(lambda t: "error: " in t and shown in " ".join(t.split()) and "sturdy" not in t)
    target.write_bytes(original)  # the next refresh recovers
    pane.wait(lambda t: re.search(r"sturdy\s+active", t) and "error: " not in t)
    pane.tmux("send-keys", "-t", "w", "q")
    assert_restored(pane.wait(lambda t: "EXIT=0" in t and has_mode(t, "icanon")), 0)


# -- issue 51, item 12: a reason, and STATUS cut last ----------------------------------


def reasons() -> list[Row]:
    failed = {"run_id": "r", "outcome": "failed", "ended_at": iso(NOW - 9),
              "reason": "agent not found on PATH: claude"}
    return [Row(loop(name="failing-loop", status="paused", reason="iteration_limit",
                     last_run=failed, recent_outcomes=["failed"] * 3)),
            Row(loop(name="ok", recent_outcomes=["ok"] * 10))]


def test_a_wide_watch_has_a_reason_column() -> None:
    header, failing, ok = texts(reasons(), 120)
    assert header.split()[-1] == "REASON"
    assert failing.endswith("agent not found on PATH: claude")
    assert "paused (iteration_limit)" in failing


@pytest.mark.parametrize("width", [80, 60])
def test_a_narrow_watch_keeps_status_whole_and_puts_the_reason_below(width: int) -> None:
    lines = texts(reasons(), width)
    assert "REASON" not in lines[0] and all(len(line) <= width for line in lines)
    failing = lines[1].split()
    assert failing[1] == "paused"
    assert "..." not in lines[1], lines  # nothing of the row is cut
    assert lines[2].startswith("  > ") and "agent not found on PATH: claude" in lines[2]
    if width == 60:
        assert lines[2] == "  > iteration_limit; agent not found on PATH: claude"
    assert lines[3].split()[-1] == "o" * len(lines[3].split()[-1])  # the newest outcomes


def test_recent_is_cut_to_its_newest_outcomes() -> None:
    rows = [Row(loop(name="n" * 30, status="paused", reason="iteration_limit",
                     recent_outcomes=["failed"] * 6 + ["ok"] * 2))]
    row = texts(rows, 66)[1]
    assert row.endswith("xxox") or row.endswith("xxoo") or row.endswith("oo"), row


def test_in_a_60_column_terminal_the_reason_shows_and_status_is_whole(
        cli: CLI, home: Path, pane: Pane) -> None:
    """A person's view: `watch` in a 60-column tmux pane."""
    cli("start", "p", "--name", "broken-nightly-job", "--every", "1s", "--max-runs", "1",
        "--command",
        agent_command("--print", "could not reach the database", "--exit", "3"), check=0)
    cli("run", "broken-nightly-job", check=1)
    pane.width = 60
    pane.start(watch_script(home))
    text = pane.wait(lambda t: re.search(r"broken-nightly-job\s+paused\s", t))
    lines = text.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("broken-nightly-job"))
    assert "..." not in lines[row] and "…" not in lines[row], text
    assert lines[row + 1].lstrip().startswith(("> iteration_limit", "↳ iteration_limit")), text
    assert all(len(line) <= 60 for line in lines), text
    pane.tmux("send-keys", "-t", "w", "q")
    pane.wait(lambda t: "EXIT=0" in t)
