"""The crontab line finds the home it was made for, whatever cron's own
environment (DESIGN §9): `cron install` and `export --to crontab` pin the
variables that located it, `doctor` asks whether ticks actually arrive, and
a second install says what it replaces. Cron itself is played here: the
line's command under `sh` with cron's bare environment and another HOME
(tests/integrations/test_cron_and_validated_exports.py has the real daemon)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CLI, TESTS, agent_command, wait_for

CRONTAB = TESTS / "cronbin" / "crontab"


@pytest.fixture
def fake_cron(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    table = tmp_path / "crontab.txt"
    monkeypatch.setenv("LOOPCTL_CRONTAB", str(CRONTAB))
    monkeypatch.setenv("FAKE_CRONTAB_FILE", str(table))
    return table


@pytest.fixture
def xdg_home(monkeypatch: pytest.MonkeyPatch, home: Path) -> Path:
    """No LOOPCTL_HOME: the home is found from XDG_CONFIG_HOME/XDG_STATE_HOME,
    as for most users. Its state folder is returned."""
    monkeypatch.delenv("LOOPCTL_HOME")
    return Path(os.environ["XDG_STATE_HOME"]) / "loopctl"


def as_cron(line: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run a crontab line's command as cron would: `sh -c`, `\\%` unescaped,
    and only what cron sets (its HOME is the passwd entry's, not ours)."""
    fields = line.split(" ", 5)
    assert len(fields) == 6, line
    cron_home = tmp_path / "cron-passwd-home"
    cron_home.mkdir(exist_ok=True)
    env = {"HOME": str(cron_home), "LOGNAME": "someone", "SHELL": "/bin/sh",
           "PATH": "/usr/bin:/bin"}
    return subprocess.run(["/bin/sh", "-c", fields[5].replace("\\%", "%")], env=env,
                          cwd=cron_home, capture_output=True, text=True, timeout=60)


def records(state_dir: Path, loop: str) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted((state_dir / "runs" / loop).glob("*.json"))]


def test_the_cron_install_line_ticks_the_home_it_was_made_for(
        cli: CLI, fake_cron: Path, xdg_home: Path, tmp_path: Path) -> None:
    cli("start", "--name", "job", "--every", "1h", "--command", agent_command(), "--", "p",
        check=0)
    line = cli.json("cron", "install")["line"]
    assert f"XDG_CONFIG_HOME={os.environ['XDG_CONFIG_HOME']}" in line
    assert f"XDG_STATE_HOME={os.environ['XDG_STATE_HOME']}" in line
    proc = as_cron(line, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (xdg_home / "last-tick").is_file()
    # The tick hands the run to a supervisor of its own and returns.
    wait_for(lambda: [r.get("outcome") for r in records(xdg_home, "job")] == ["ok"])
    assert not (tmp_path / "cron-passwd-home" / ".config").exists()  # no other home made


def test_the_exported_crontab_line_runs_the_loop_of_this_home(
        cli: CLI, xdg_home: Path, tmp_path: Path) -> None:
    cli("start", "--name", "job", "--every", "10m", "--command", agent_command(), "--", "p",
        check=0)
    proc = cli("export", "job", "--to", "crontab", check=0)
    [line] = [x for x in proc.stdout.splitlines() if "loopctl export job" in x]
    assert f"XDG_STATE_HOME={os.environ['XDG_STATE_HOME']}" in line
    fired = as_cron(line, tmp_path)
    assert fired.returncode == 0, fired.stderr
    assert [r["outcome"] for r in records(xdg_home, "job")] == ["ok"]


def test_with_loopctl_home_set_the_line_pins_it(cli: CLI, fake_cron: Path,
                                                 tmp_path: Path) -> None:
    line = cli.json("cron", "install")["line"]
    assert f"LOOPCTL_HOME={cli.home}" in line and "XDG_" not in line
    assert as_cron(line, tmp_path).returncode == 0
    assert (cli.state_dir / "last-tick").is_file()


def drivers(cli: CLI) -> dict[str, str]:
    report = json.loads(cli("doctor", "--json").stdout)
    [finding] = [f for f in report["findings"] if f["check"] == "drivers"]
    return finding


def age(path: Path, seconds: float) -> None:
    then = path.stat().st_mtime - seconds
    os.utime(path, (then, then))


def test_doctor_fails_when_the_line_s_ticks_do_not_reach_this_home(
        cli: CLI, fake_cron: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import loopctl.integrations.crontab as crontab

    monkeypatch.setattr(crontab, "cron_daemon_running", lambda: True)  # in-process doctor
    cli("start", "p", "--name", "a", "--every", "1h", "--after", "1h", check=0)
    cli("cron", "install", check=0)
    fresh = drivers(cli)
    assert fresh["level"] == "ok" and "first tick should land within a minute" in \
        fresh["message"], fresh
    age(cli.state_dir / "cron-line", 600)  # installed ten minutes ago, never ticked
    stale = drivers(cli)
    assert stale["level"] == "error", stale
    assert "no tick has reached this home" in stale["message"]
    assert "none yet" in stale["message"] and "cron.log" in stale["message"]
    assert cli("doctor").returncode == 1
    assert "none has reached this home yet" in cli("cron", "status", check=0).stdout
    cli("tick", "--quiet", check=0)  # a tick lands: the line works
    assert cli.json("cron", "status")["last_tick"] is not None
    ticked = drivers(cli)
    assert ticked["level"] == "ok" and "last tick" in ticked["message"], ticked
    age(cli.state_dir / "last-tick", 900)
    assert drivers(cli)["level"] == "error"


def test_a_second_install_says_which_hand_edited_line_it_replaces(
        cli: CLI, fake_cron: Path) -> None:
    first = cli.json("cron", "install")["line"]
    edited = first.replace("tick --quiet", "tick --quiet --wait")
    fake_crontab_lines = fake_cron.read_text().replace(first, edited)
    fake_cron.write_text(fake_crontab_lines)
    proc = cli("cron", "install", check=0)
    assert f"replaced (edited by hand since loopctl wrote it): {edited}" in proc.stderr
    assert fake_cron.read_text().splitlines() == [first]
    again = cli("cron", "install", check=0)
    assert "replaced" not in again.stderr and again.stdout.startswith("already installed")


def test_a_tick_marks_its_arrival_only_where_cron_install_asked(
        cli: CLI, fake_cron: Path) -> None:
    tick = [sys.executable, "-m", "loopctl", "tick", "--quiet"]
    subprocess.run(tick, check=True)
    assert not cli.home.exists()  # a fresh home stays untouched
    cli("start", "--name", "x", "--every", "1h", "--after", "1h", "--", "p", check=0)
    subprocess.run(tick, check=True)
    mark = cli.state_dir / "last-tick"
    assert not mark.exists()  # no crontab line: nothing to prove
    cli("cron", "install", check=0)
    assert mark.stat().st_mtime == 0  # made, with no tick yet
    subprocess.run(tick, check=True)
    assert mark.stat().st_mtime > 0


def test_the_systemd_unit_pins_the_home_too(cli: CLI, xdg_home: Path) -> None:
    """A user manager's HOME is the passwd entry's too (systemd-analyze
    verifies the quoting in tests/integrations/test_cron_and_validated_exports.py)."""
    cli("start", "--name", "job", "--every", "10m", "--", "p", check=0)
    service = cli("export", "job", "--to", "systemd", check=0).stdout
    for key in ("XDG_CONFIG_HOME", "XDG_STATE_HOME"):
        assert f'Environment="{key}={os.environ[key]}"\n' in service, service
