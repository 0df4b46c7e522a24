"""`loopctl export` at its edges (DESIGN §9): `--every` values cron cannot
step exactly, cron lines systemd or GitHub's UTC cannot express, a cron that
honours CRON_TZ, fires too far apart for GitHub's cache, and line breaks that
would split a scheduler's line. Pure apart from PATH lookups."""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path

import pytest

from loopctl.domain.errors import UsageError
from loopctl.domain.model import parse_loop
from loopctl.integrations.export import Target, export, systemd_quote
from loopctl.integrations.export.schedules import every_to_cron, github_schedule

PIN = "loopctl @ git+https://github.com/o/loopctl@v1.2.3"


@pytest.mark.parametrize(("seconds", "cron", "warning"), [
    (2 * 86400, "0 0 */2 * *", "became every 2 days of the month"),
    (5 * 3600, "0 */4 * * *", "became every 4h (cron steps must divide a day)"),
    (90 * 60, "0 */2 * * *", "became every 2h"),
    (150 * 60, "0 */2 * * *", "became every 2h"),
    (23 * 3600 + 40 * 60, "0 0 * * *", "became every 24h"),
    (7 * 60, "*/6 * * * *", "became every 6m (cron steps must divide an hour)"),
])
def test_an_every_cron_cannot_step_is_refused_unless_drift_is_allowed(
        seconds: int, cron: str, warning: str) -> None:
    with pytest.raises(UsageError, match=f"{re.escape(warning)}.*--allow-drift"):
        every_to_cron(seconds, [])
    warnings: list[str] = []
    assert every_to_cron(seconds, warnings, allow_drift=True) == cron
    assert any(warning in w for w in warnings), warnings


def test_an_exact_step_has_only_the_wall_clock_warning() -> None:
    warnings: list[str] = []
    assert every_to_cron(86400, warnings) == "0 0 * * *"
    assert every_to_cron(3 * 3600, warnings) == "0 */3 * * *"
    assert len(warnings) == 2 and all("wall-clock slots" in w for w in warnings)


def test_a_zone_at_utc_in_winter_keeps_its_winter_line_unshifted() -> None:
    schedule = github_schedule("30 9 * * *", "Europe/London", year=2026)
    assert schedule.crons == ("30 9 * * *", "30 8 * * *")
    assert schedule.offsets == {"30 9 * * *": "+0000", "30 8 * * *": "+0100"}


def test_times_that_form_no_grid_in_utc_are_refused_for_github() -> None:
    # 09:00 09:30 10:00 10:30 in India are 03:30 04:00 04:30 05:00 UTC:
    # minutes {0, 30} x hours {3, 4, 5} would fire six times, not four.
    with pytest.raises(UsageError, match="do not form a cron grid in UTC"):
        github_schedule("0,30 9,10 * * *", "Asia/Kolkata", year=2026)


def fake_crond(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "cronie-bin"
    bin_dir.mkdir()
    crond = bin_dir / "crond"
    crond.write_text("#!/bin/sh\nexit 0\n")
    crond.chmod(crond.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_a_cron_that_honours_cron_tz_gets_the_zone_in_the_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loop = parse_loop("nightly", {"prompt": "p", "cron": "0 3 * * *", "tz": "Asia/Tokyo"})
    plain = export(loop, Target("crontab", home="/h", state_dir="/h/state"))
    assert "CRON_TZ" not in plain.files["nightly.crontab"]
    assert any("ignores CRON_TZ" in w for w in plain.warnings)
    fake_crond(tmp_path, monkeypatch)
    result = export(loop, Target("crontab", home="/h", state_dir="/h/state"))
    lines = result.files["nightly.crontab"].splitlines()
    assert lines[0] == "CRON_TZ=Asia/Tokyo"
    assert lines[1].startswith("0 3 * * * ")
    assert not any("CRON_TZ" in w for w in result.warnings)


def test_without_a_home_the_exports_use_the_default_home() -> None:
    loop = parse_loop("job", {"prompt": "p", "every": "1h"})
    line = export(loop, Target("crontab", home=None, state_dir="/s")).files["job.crontab"]
    assert "LOOPCTL_HOME" not in line
    assert line.startswith("0 * * * * PATH=")
    assert ">> /s/cron-job.log 2>&1 # loopctl export job" in line
    units = export(loop, Target("systemd", home=None, state_dir="/s")).files
    service = units["loopctl-job.service"]
    assert "Environment=\"PATH=" in service and "LOOPCTL_HOME" not in service
    with_home = export(loop, Target("systemd", home="/h", state_dir="/h/state")).files
    assert 'Environment="LOOPCTL_HOME=/h"' in with_home["loopctl-job.service"]


def test_a_line_break_in_a_scheduler_line_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = parse_loop("job", {"prompt": "p", "every": "1h"})
    with pytest.raises(UsageError, match="cron reads one line per job"):
        export(loop, Target("crontab", home="/a\nb", state_dir="/s"))
    with pytest.raises(UsageError, match="contains a line break"):
        systemd_quote("PATH=/bin\n[Service]")
    odd_cwd = parse_loop("job", {"prompt": "p", "every": "1h", "cwd": "/srv/a\nExecStart=x"})
    with pytest.raises(UsageError, match="into a systemd unit: it contains a line break"):
        export(odd_cwd, Target("systemd", home="/h", state_dir="/h/state"))
    monkeypatch.setattr(sys, "executable", "/opt/py\nthon")
    with pytest.raises(UsageError, match="the Python path contains a line break"):
        export(loop, Target("systemd", home="/h", state_dir="/h/state"))


def test_fires_further_apart_than_githubs_cache_lives_are_warned_about() -> None:
    monthly = parse_loop("monthly", {"prompt": "p", "cron": "0 6 1 * *", "tz": "UTC"})
    result = export(monthly, Target("github", install=PIN))
    assert any("GitHub evicts a cache not used for 7 days" in w for w in result.warnings)
    weekly = parse_loop("weekly", {"prompt": "p", "cron": "0 6 * * 1", "tz": "UTC"})
    result = export(weekly, Target("github", install=PIN))
    assert not any("evicts" in w for w in result.warnings)


def test_an_unknown_target_is_refused() -> None:
    loop = parse_loop("job", {"prompt": "p", "every": "1h"})
    with pytest.raises(UsageError, match="bad --to 'nomad': expected one of crontab, systemd, "
                                         "k8s, github"):
        export(loop, Target("nomad"))
