"""`GET /metrics` (DESIGN §19): exactly the series listed, clean under the
real `promtool check metrics`, counters that never go down when old
records are pruned, and behind the token."""

from __future__ import annotations

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


def test_the_tally_forgets_pruned_runs_but_keeps_their_counts(cli: CLI) -> None:
    """A long-lived server's tally holds the ids of the records on disk only
    (it held every id it ever counted: memory grew with every run)."""
    from loopctl.serve.metrics import RunTally
    from loopctl.storage.store import Store

    cli("start", "p", "--name", "good", "--every", "1h", "--keep-runs", "1",
        "--command", agent_command("--print", "ok"), check=0)
    tally = RunTally()
    for _ in range(4):
        cli("run", "good")
        tally.update(Store(), ["good"])
    assert tally.outcomes["good"]["ok"] == 4
    assert len(tally.seen["good"]) == 1
