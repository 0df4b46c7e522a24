"""Issue 50 item 5 through the CLI: every form `--cron` accepts either
exports to a schedule the target itself reads as loopctl's instants
(systemd-analyze here; the property test in test_same_instants covers the
rest) or is refused: exit 2, one line naming the field, the target and the
way out, nothing written."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import CLI

IMAGE = ("--image", "registry.example/loopctl-agent:1.0")
PIN = ("--install", "loopctl @ git+https://github.com/o/loopctl@v1.2.3")
EXTRA = {"k8s": IMAGE, "github": PIN, "crontab": (), "systemd": ()}


@pytest.mark.parametrize(("cron", "field"), [
    ("0 0 L * *", "day of month"), ("0 0 15W * *", "day of month"),
    ("0 0 * * 1#2", "day of week"),
])
def test_forms_no_target_can_say_are_refused_on_every_target(
        cli: CLI, tmp_path: Path, cron: str, field: str) -> None:
    cli("start", "--name", "odd", "--cron", cron, "--", "echo", check=0)
    for target, extra in EXTRA.items():
        out = tmp_path / target
        proc = cli("export", "odd", "--to", target, "-o", str(out), *extra)
        assert proc.returncode == 2, (target, proc.stderr)
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
        assert field in proc.stderr and f"--to {target}" in proc.stderr
        assert "loopctl's own driver" in proc.stderr and not out.exists()


@pytest.mark.parametrize(("cron", "calendar"), [
    ("0 9 * * MON-FRI", "Mon..Fri *-*-* 09:00:00"),
    ("0 9 * * sun", "Sun *-*-* 09:00:00"),
    ("0 0 */2 jan,FEB *", "*-01..02-01,03,05,07,09,11,13,15,17,19,21,23,25,27,29,31 00:00:00"),
    ("0 0 */2 * 1", "Mon *-*-01,03,05,07,09,11,13,15,17,19,21,23,25,27,29,31 00:00:00"),
])
def test_systemd_writes_what_systemd_accepts_for_names_and_steps(
        cli: CLI, tmp_path: Path, cron: str, calendar: str) -> None:
    cli("start", "--name", "named", "--cron", cron, "--tz", "UTC", "--", "echo", check=0)
    proc = cli("export", "named", "--to", "systemd", "-o", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    timer = (tmp_path / "loopctl-named.timer").read_text()
    assert f"OnCalendar={calendar} UTC\n" in timer
    analyze = shutil.which("systemd-analyze")
    if analyze:
        check = subprocess.run([analyze, "calendar", f"{calendar} UTC"], capture_output=True,
                               text=True, check=False)
        assert check.returncode == 0, check.stderr


def test_day_fields_that_or_become_two_calendar_lines(cli: CLI, tmp_path: Path) -> None:
    cli("start", "--name", "either", "--cron", "0 0 1,15 * 1", "--tz", "UTC", "--", "echo",
        check=0)
    assert cli("export", "either", "--to", "systemd", "-o", str(tmp_path)).returncode == 0
    timer = (tmp_path / "loopctl-either.timer").read_text()
    assert "OnCalendar=Mon *-*-* 00:00:00 UTC\nOnCalendar=*-*-01,15 00:00:00 UTC\n" in timer


@pytest.mark.parametrize(("target", "needle"), [
    ("crontab", "0 0 */2 * 1 "), ("k8s", "day of month and day of week"),
    ("github", "day of month and day of week"),
])
def test_odd_days_that_are_mondays_are_said_or_refused(cli: CLI, tmp_path: Path,
                                                       target: str, needle: str) -> None:
    cli("start", "--name", "oddmon", "--cron", "0 0 */2 * 1", "--tz", "UTC", "--", "echo",
        check=0)
    proc = cli("export", "oddmon", "--to", target, *EXTRA[target])
    if target == "crontab":  # Debian's cron reads it as loopctl now does
        assert proc.returncode == 0 and needle in proc.stdout
    else:  # robfig/cron ORs `*/2` with a weekday; GitHub does not say
        assert proc.returncode == 2 and needle in proc.stderr
        assert proc.stderr.count("\n") == 1


@pytest.mark.parametrize(("cron", "target", "expect"), [
    ("30 2 * * *", "systemd", 2),   # the spring-forward day: systemd skips it
    ("30 2 * * *", "github", 2),
    ("30 2 * * *", "k8s", 2),
    ("30 2 * * *", "crontab", 2),
    ("0 * * * *", "systemd", 0),    # systemd fires the repeated 02:00 once, as loopctl does
    ("0 * * * *", "github", 2),     # the guard would fire it twice
    ("30 2 * * 1-5", "github", 0),  # the clocks change on Sundays
])
def test_dst_zones_export_only_where_the_target_keeps_the_rule(
        cli: CLI, cron: str, target: str, expect: int) -> None:
    cli("start", "--name", "berlin", "--cron", cron, "--tz", "Europe/Berlin", "--", "echo",
        check=0)
    proc = cli("export", "berlin", "--to", target, *EXTRA[target])
    assert proc.returncode == expect, proc.stderr
    if expect == 2:
        assert proc.stderr.count("\n") == 1 and f"--to {target}" in proc.stderr
        assert "Europe/Berlin" in proc.stderr and "--tz UTC" in proc.stderr
