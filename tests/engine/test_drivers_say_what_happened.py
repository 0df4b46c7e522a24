"""Issue 29 where a driver or a real terminal is the subject: `doctor` asks
whether anything will fire the active loops (item 4), the daemon narrates
run ends and transitions (item 1), a plain `tick` says who holds the lease
(item 15), and `ls`/`watch` in tmux panes of 130 and 60 columns (items 2, 15)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import CLI, TESTS, agent_command, tool, wait_for

CRONTAB = TESTS / "cronbin" / "crontab"
TTL = "3"


@pytest.fixture
def fake_cron(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The crontab stand-in (its table in a file) for every loopctl this test runs."""
    table = tmp_path / "crontab.txt"
    monkeypatch.setenv("LOOPCTL_CRONTAB", str(CRONTAB))
    monkeypatch.setenv("FAKE_CRONTAB_FILE", str(table))
    return table


@pytest.fixture
def cron_daemon(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process named `cron` (a copy of sleep): what `cron_daemon_running` looks for."""
    binary = tmp_path / "bin" / "cron"
    binary.parent.mkdir()
    shutil.copy(shutil.which("sleep") or "/bin/sleep", binary)
    proc = subprocess.Popen([str(binary), "600"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def findings(cli: CLI, check: str, env: dict[str, str] | None = None) -> list[dict[str, str]]:
    report = json.loads(cli("doctor", "--json", env=env).stdout)
    return [f for f in report["findings"] if f["check"] == check]


def test_doctor_fails_when_nothing_will_fire_the_active_loops(
        cli: CLI, fake_cron: Path, request: pytest.FixtureRequest) -> None:
    import loopctl.integrations.crontab as crontab

    assert cli("doctor").returncode == 0  # no loops: nothing to fire
    cli("start", "p", "--name", "a", "--every", "1h", check=0)
    proc = cli("doctor")
    assert proc.returncode == 1 and "needs attention" in proc.stdout
    [finding] = findings(cli, "drivers")
    assert finding["level"] == "error"
    assert "1 active loop but nothing will fire it" in finding["message"]
    if not crontab.cron_daemon_running():  # no cron at all: the daemon is the fix
        assert "keep `loopctl daemon` running" in finding["message"]
        assert "cron install" not in finding["message"]
        request.getfixturevalue("cron_daemon")
        wait_for(crontab.cron_daemon_running)
    # cron runs, the line is missing: that is the fix.
    [finding] = findings(cli, "drivers")
    assert "run `loopctl cron install`" in finding["message"], finding
    cli("pause", "a", check=0)
    assert cli("doctor").returncode == 0  # nothing active: nothing to fire


def test_a_cron_line_without_cron_gets_the_fix_that_applies(
        cli: CLI, fake_cron: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import loopctl.integrations.crontab as crontab

    cli("start", "p", "--name", "a", "--every", "1h", check=0)
    cli("cron", "install", check=0)
    if crontab.cron_daemon_running():
        pytest.skip("a real cron daemon runs on this machine")
    [finding] = findings(cli, "drivers")
    assert finding["level"] == "error" and "no cron daemon is running" in finding["message"]
    assert "start cron" in finding["message"] and "cron install" not in finding["message"]


def test_with_cron_running_the_line_s_path_must_find_the_agent(
        cli: CLI, fake_cron: Path, cron_daemon: subprocess.Popen[bytes],
        tmp_path: Path) -> None:
    agent_dir = tmp_path / "agents"
    agent_dir.mkdir()
    agent = agent_dir / "myagent"
    agent.write_text("#!/bin/sh\necho hi\n")
    agent.chmod(0o755)
    env = {"PATH": f"{agent_dir}{os.pathsep}{os.environ['PATH']}"}
    cli("start", "p", "--name", "a", "--every", "1h", "--command", str(agent), check=0)
    cli("cron", "install", env=env, check=0)
    wait_for(lambda: findings(cli, "drivers") and findings(cli, "drivers")[0]["level"] == "ok")
    assert not findings(cli, "agents", env=env)
    # A second loop whose agent the installed line's PATH does not have.
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    shutil.copy(agent, other_dir / "otheragent")
    env["PATH"] = f"{other_dir}{os.pathsep}{env['PATH']}"
    cli("start", "p", "--name", "b", "--every", "1h", "--command", "otheragent", env=env,
        check=0)
    [warning] = findings(cli, "agents", env=env)  # doctor's own PATH finds it
    assert warning["level"] == "warn" and "'otheragent'" in warning["message"]
    assert "the crontab line's PATH" in warning["message"]
    assert "`loopctl cron install` again" in warning["message"]


def daemon(cli: CLI, env: dict[str, str], log: Path) -> subprocess.Popen[str]:
    with log.open("w") as handle:
        proc = cli.popen("daemon", env={"LOOPCTL_LEASE_TTL": TTL, **env}, stderr=handle)
    wait_for(lambda: (json.loads((cli.state_dir / "lease.json").read_text())
                      if (cli.state_dir / "lease.json").exists() else {}).get("pid") == proc.pid)
    return proc


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=15)


def test_doctor_warns_when_the_daemon_s_path_lacks_an_agent(cli: CLI, tmp_path: Path) -> None:
    """The daemon's log says `agent not found`; `doctor`, run from a shell that
    finds the agent, must say so too."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "claude").chmod(0o755)
    mine = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    cli("start", "p", "--name", "c", "--every", "1h", "--after", "1h", "--agent", "claude",
        env=mine, check=0)
    proc = daemon(cli, {"PATH": "/usr/bin:/bin"}, tmp_path / "daemon.log")
    try:
        report = json.loads(cli("doctor", "--json", env=mine).stdout)
        checks = {(f["check"], f["level"]): f["message"] for f in report["findings"]}
        assert ("drivers", "ok") in checks
        message = checks[("agents", "warn")]
        assert f"the daemon's (pid {proc.pid}) PATH" in message and "'claude'" in message
        assert "restart `loopctl daemon`" in message
    finally:
        stop(proc)


def test_doctor_fails_on_a_failed_hand_off(cli: CLI, home: Path, fake_cron: Path) -> None:
    cli("start", "p", "--name", "h", "--every", "1h", check=0)
    cli("pause", "h", check=0)  # only the hand-off is wrong
    path = home / "state" / "state.json"
    state = json.loads(path.read_text())
    state["loops"]["h"]["last_handoff"] = {"handoff": "handoff_failed",
                                           "branch": "loopctl/h/20261201T100000Z-0001",
                                           "handoff_error": "push to origin failed: denied"}
    path.write_text(json.dumps(state))
    proc = cli("doctor")
    assert proc.returncode == 1
    [finding] = findings(cli, "handoff")
    assert "push to origin failed: denied" in finding["message"]
    assert "loopctl/h/20261201T100000Z-0001" in finding["message"]


def test_the_daemon_logs_each_run_end_and_each_transition(cli: CLI, tmp_path: Path) -> None:
    cli("start", "p", "--name", "flaky", "--every", "1h", "--max-failures", "1",
        "--command", agent_command("--stderr", "Not logged in \x1b[2J· Please run /login",
                                   "--exit", "1"), check=0)
    log = tmp_path / "daemon.log"
    proc = daemon(cli, {}, log)
    try:
        wait_for(lambda: "flaky is now paused" in log.read_text(), timeout=30)
    finally:
        stop(proc)
    text = log.read_text()
    ended = [line for line in text.splitlines() if " of flaky ended: " in line]
    assert len(ended) == 1, text
    assert re.search(r"run \S+ of flaky ended: failed \(exit 1, [\d.]+s\): Not logged in "
                     r"· Please run /login$", ended[0]), ended[0]
    assert re.search(r"flaky is now paused \(failure_limit\): 1 failure in a row", text)
    assert "\x1b" not in text


def test_a_plain_tick_says_who_holds_the_lease(cli: CLI, tmp_path: Path) -> None:
    cli("start", "p", "--name", "idle", "--every", "1h", "--after", "1h", check=0)
    cli("tick", check=0)  # state and its summary: the idle fast path applies
    proc = daemon(cli, {}, tmp_path / "daemon.log")
    try:
        out = cli("tick", env={"LOOPCTL_LEASE_TTL": TTL}, check=0)
        assert f"daemon pid {proc.pid} holds the lease; nothing to do" in out.stderr
        quiet = cli("tick", "--quiet", env={"LOOPCTL_LEASE_TTL": TTL}, check=0)
        assert quiet.stderr == "" and quiet.stdout == ""  # cron's line stays silent
    finally:
        stop(proc)


# -- real terminals ------------------------------------------------------------------


class Pane:
    """A tmux pane of a given size on a private server (socket)."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.socket = f"loopctl-nc-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}

    def tmux(self, *args: str) -> str:
        proc = subprocess.run([self.binary, "-L", self.socket, "-f", "/dev/null", *args],
                              capture_output=True, text=True, timeout=10, env=self.env)
        assert proc.returncode == 0, (args, proc.stderr)
        return proc.stdout

    def start(self, width: int, script: str) -> None:
        self.tmux("new-session", "-d", "-x", str(width), "-y", "30", "-s", "w", "--",
                  "sh", "-c", script)

    def text(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "w")

    def kill(self) -> None:
        subprocess.run([self.binary, "-L", self.socket, "kill-server"], capture_output=True,
                       timeout=10, env=self.env)


@pytest.fixture
def pane() -> Iterator[Pane]:
    terminal = Pane(tool("tmux"))
    try:
        yield terminal
    finally:
        terminal.kill()


LONG = ("nightly-backup-primary", "nightly-backup-replica")


def loopctl_in(home: Path, *args: str, columns: str | None = None) -> str:
    env = ["env", "-u", "COLUMNS", f"LOOPCTL_HOME={home}", "NO_COLOR=1"] + (
        [f"COLUMNS={columns}"] if columns else [])
    return shlex.join([*env, sys.executable, "-m", "loopctl", *args])


def test_ls_in_a_130_column_terminal_uses_its_width(cli: CLI, home: Path, pane: Pane) -> None:
    for name in LONG:
        cli("start", "p", "--name", name, "--cron", "0 3 * * *", "--tz",
            "America/Argentina/Buenos_Aires", check=0)
    pane.start(130, loopctl_in(home, "ls") + "; echo DONE; sleep 60")
    text = str(wait_for(lambda: "DONE" in (t := pane.text()) and t))
    rows = [line for line in text.splitlines() if line.startswith("nightly-backup-")]
    assert [row.split()[0] for row in rows] == list(LONG)
    assert all("America/Argentina/Buenos_Aires" in row for row in rows), text
    assert all(len(row) <= 130 for row in rows)


def test_watch_at_60_columns_keeps_its_header_and_rows_on_one_line(
        cli: CLI, home: Path, pane: Pane) -> None:
    """With an exported COLUMNS=80 left from a wider window, Rich drew 80-column
    rows into 60 columns: every row wrapped and the header scrolled away."""
    for name in LONG:
        cli("start", "p", "--name", name, "--every", "10m", "--after", "1h", check=0)
    pane.start(60, loopctl_in(home, "watch", "--interval", "0.5", columns="80")
               + "; echo EXIT=$?; sleep 60")
    text = str(wait_for(lambda: "NAME" in (t := pane.text()) and "replica" in t and t))
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines[0].startswith("loopctl watch") and lines[1].startswith("NAME")
    rows = [line for line in lines if line.startswith("nightly-backup-")]
    assert [row.split()[0] for row in rows] == list(LONG), text
    assert all("active" in row or "act" in row for row in rows), text
    assert len(lines) == 4, text  # title, header, two rows: nothing wrapped
    pane.tmux("send-keys", "-t", "w", "q")
    wait_for(lambda: "EXIT=0" in pane.text())
