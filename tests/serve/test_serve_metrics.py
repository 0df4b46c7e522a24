"""`GET /metrics` (DESIGN §19): exactly the series listed, clean under the
real `promtool check metrics`, counters that never go down when old
records are pruned, and behind the token."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from conftest import CLI, agent_command, tool
from serve.support import serving

pytestmark = pytest.mark.slow

FAMILIES = {
    "loopctl_runs_total": "counter", "loopctl_run_duration_seconds": "histogram",
    "loopctl_cost_usd_total": "counter", "loopctl_last_run_timestamp_seconds": "gauge",
    "loopctl_last_success_timestamp_seconds": "gauge",
    "loopctl_next_run_timestamp_seconds": "gauge", "loopctl_loop_up": "gauge",
    "loopctl_loop_status": "gauge", "loopctl_in_flight": "gauge", "loopctl_queued": "gauge",
    "loopctl_account_held": "gauge", "loopctl_webhook_deliveries_total": "counter",
    "loopctl_build_info": "gauge", "loopctl_slots_skipped_total": "counter",
    "loopctl_check_runs_total": "counter",
}


def sample(text: str, series: str) -> float:
    for row in text.splitlines():
        if row.startswith(series + " "):
            return float(row.rsplit(" ", 1)[1])
    raise AssertionError(f"no {series} in\n{text}")


def test_metrics_pass_promtool_with_exactly_the_listed_series(cli: CLI,
                                                              tmp_path: Path) -> None:
    promtool = tool("promtool")
    cli("start", "p", "--name", "good", "--every", "1h", "--keep-runs", "1",
        "--command", agent_command("--print", "ok"), check=0)
    cli("start", "p", "--name", "bad", "--every", "1h",
        "--command", agent_command("--exit", "3"), check=0)
    # An agent that succeeds under a check that fails is a failed run (§16).
    cli("start", "p", "--name", "red", "--every", "1h", "--command", "true",
        "--check", "false", check=0)
    cli("run", "good")
    cli("run", "bad")
    cli("run", "red")
    with serving(tmp_path) as served:
        assert served.request("GET", "/metrics", token=None)[0] == 401
        status, headers, body = served.request("GET", "/metrics")
        assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
        first = body.decode()
        cli("run", "good")  # the first record of `good` is pruned now (--keep-runs 1)
        second = served.request("GET", "/metrics")[2].decode()
    checked = subprocess.run([promtool, "check", "metrics"], input=second, text=True,
                             capture_output=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert dict(re.findall(r"^# TYPE (\S+) (\S+)$", second, re.M)) == FAMILIES
    assert sample(first, 'loopctl_runs_total{loop="good",outcome="ok"}') == 1
    assert sample(second, 'loopctl_runs_total{loop="good",outcome="ok"}') == 2, \
        "a pruned record stays counted"
    assert sample(second, 'loopctl_runs_total{loop="bad",outcome="failed"}') == 1
    assert sample(second, 'loopctl_run_duration_seconds_count{loop="good"}') == 2
    assert sample(second, 'loopctl_loop_up{loop="good"}') == 1
    assert sample(second, 'loopctl_loop_up{loop="bad"}') == 0, "a failing loop is down"
    assert sample(second, 'loopctl_runs_total{loop="red",outcome="failed"}') == 1
    assert 'loopctl_runs_total{loop="red",outcome="ok"}' not in second
    assert sample(second, 'loopctl_loop_up{loop="red"}') == 0, "a red check is down"
    assert sample(second, 'loopctl_check_runs_total{loop="red",result="failed"}') == 1
    assert 'loopctl_check_runs_total{loop="good"' not in second  # no check, no series
    assert sample(second, 'loopctl_loop_status{loop="good",status="active"}') == 1
    assert sample(second, 'loopctl_loop_status{loop="good",status="paused"}') == 0
    assert sample(second, "loopctl_in_flight") == 0
    assert 'loopctl_build_info{version="' in second
    assert not re.search(r"\d{8}T\d{6}Z-\d+", second), "no run id as a label"


def test_runs_total_counts_every_run_after_keep_runs_pruned_them_and_a_restart(
        cli: CLI, home: Path, tmp_path: Path) -> None:
    """The counters are the loop's state, not its records kept: 6 runs under
    `--keep-runs 2` read 6 (main counted the 2 records left), on a server
    started after them and again after its restart; `rm` drops the series."""
    cli("start", "p", "--name", "good", "--every", "1h", "--keep-runs", "2",
        "--command", agent_command("--print", "ok"), check=0)
    for _ in range(6):
        cli("run", "good", check=0)
    records = list((home / "state" / "runs" / "good").glob("*.json"))
    assert len(records) == 2, records  # the fixture really pruned
    with serving(tmp_path) as served:
        first = served.request("GET", "/metrics")[2].decode()
    assert sample(first, 'loopctl_runs_total{loop="good",outcome="ok"}') == 6
    assert sample(first, 'loopctl_run_duration_seconds_count{loop="good"}') == 6
    assert sample(first, 'loopctl_run_duration_seconds_bucket{loop="good",le="+Inf"}') == 6
    assert sample(first, 'loopctl_last_success_timestamp_seconds{loop="good"}') > 0
    cli("run", "good", check=0)
    with serving(tmp_path) as served:  # a restarted server remembers nothing itself
        second = served.request("GET", "/metrics")[2].decode()
        cli("rm", "good", check=0)
        gone = served.request("GET", "/metrics")[2].decode()
    assert sample(second, 'loopctl_runs_total{loop="good",outcome="ok"}') == 7
    assert 'loop="good"' not in gone, gone


def test_a_state_file_from_before_the_tally_counts_on_from_its_records(
        cli: CLI, home: Path, tmp_path: Path) -> None:
    """An entry without `tally` loads (no `error` pause) and shows what its
    records kept say; its next run starts the tally there, one more."""
    cli("start", "p", "--name", "old", "--every", "1h", "--keep-runs", "2",
        "--command", agent_command("--print", "ok"), check=0)
    for _ in range(3):
        cli("run", "old", check=0)
    state_file = home / "state" / "state.json"
    state = json.loads(state_file.read_text())
    assert state["loops"]["old"].pop("tally")["runs"] == {"ok": 3}
    state_file.write_text(json.dumps(state))
    with serving(tmp_path) as served:
        before = served.request("GET", "/metrics")[2].decode()
        cli("run", "old", check=0)
        after = served.request("GET", "/metrics")[2].decode()
    assert sample(before, 'loopctl_runs_total{loop="old",outcome="ok"}') == 2
    assert sample(after, 'loopctl_runs_total{loop="old",outcome="ok"}') == 3
    status = json.loads(cli("status", "old", "--json", check=0).stdout)
    assert status["status"] == "active", status
