"""Every slot on record (DESIGN §20, issue 50 item 2): a due slot of an
active loop that does not run leaves a compact record with its reason,
listed by `history NAME --skipped [--json]`, summed up by `status`
(`skipped N (last: REASON, WHEN)`) and counted in /metrics as
`loopctl_slots_skipped_total{loop,reason}`; the records stay bounded."""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

import pytest
from serve.support import serving

from conftest import CLI, agent_command
from loopctl.domain.timestamps import iso
from loopctl.storage.runs import MAX_SKIPS


def hourly(cli: CLI, name: str, *extra: str) -> float:
    cli("start", "p", "--name", name, "--cron", "0 * * * *", "--tz", "UTC",
        "--command", agent_command("--print", "x"), *extra, check=0)
    return math.floor(time.time() / 3600 + 1) * 3600


def at(instant: float) -> dict[str, str]:
    return {"LOOPCTL_CLOCK_OFFSET": repr(instant - time.time())}


def test_missed_slots_are_on_record_with_their_reason(cli: CLI) -> None:
    slot = hourly(cli, "none", "--catch-up", "none")
    hourly(cli, "window", "--catch-up-window", "10m")
    hourly(cli, "one")
    late = slot + 3 * 3600 + 1500  # 25 minutes past its fourth slot
    report = cli.json("tick", "--wait", "--json", env=at(late))
    assert [f["loop"] for f in report["fired"]] == ["one"]
    latest = iso(slot + 3 * 3600)
    skipped = {name: cli.json("history", name, "--skipped", "--json")["skipped_slots"]
               for name in ("none", "window", "one")}
    assert [(e["reason"], e["slot"], e.get("count")) for e in skipped["none"]] == \
        [("catch_up_none", f"schedule:{latest}", 4)]
    assert [(e["reason"], e["slot"], e.get("count")) for e in skipped["window"]] == \
        [("outside_window", f"schedule:{latest}", 4)]  # the 3 missed before it counted in
    (missed,) = skipped["one"]  # folded into the catch-up, which names them
    (run,) = cli.records("one")
    assert (missed["reason"], missed["count"], missed["run_id"]) == ("missed", 3, run["run_id"])
    assert run["slot"] == f"schedule:{latest}" and run["missed"] == 3
    status = cli("status", "window", env=at(late + 60), check=0).stdout
    # About a minute: the skip was recorded when the tick ran, a moment
    # after `at(late)` was computed (59s on a loaded machine).
    assert re.search(r"^  skipped    1 \(last: outside_window, (5\ds|1m|1m\ds) ago\)$",
                     status, re.M), status
    assert "outside_window" in cli("history", "window", "--skipped", check=0).stdout
    assert cli.json("status", "none")["skipped_slots"]["by_reason"] == {"catch_up_none": 1}


@pytest.mark.slow
def test_skip_records_are_bounded_and_counted_in_metrics(cli: CLI, tmp_path: Path) -> None:
    slot = hourly(cli, "none", "--catch-up", "none")
    folder = cli.state_dir / "runs" / "none"
    folder.mkdir(parents=True)
    line = json.dumps({"slot": "schedule:2026-01-01T00:00:00Z", "reason": "held",
                       "at": "2026-01-01T00:00:00Z"})
    (folder / "skipped.jsonl").write_text((line + "\n") * (MAX_SKIPS + 50) + "{bad\n[1]\n")
    cli("tick", env=at(slot + 3 * 3600), check=0)
    entries = cli.json("history", "none", "--skipped", "--json", "--limit", "0")
    assert len(entries["skipped_slots"]) == MAX_SKIPS
    assert entries["skipped_slots"][-1]["reason"] == "catch_up_none"
    with serving(tmp_path) as served:
        body = served.request("GET", "/metrics")[2].decode()
    assert 'loopctl_slots_skipped_total{loop="none",reason="catch_up_none"} 1' in body
