"""Listing at scale (issue 30): what makes `ls`, `status` and `ls --json`
fast stays honest.

- A reading command saves the parsed copy of a hand-edited `loops.yaml`, so
  the next read needs no YAML; it writes nothing else, and a damaged or
  stale copy is detected and rebuilt, also beside concurrent drivers.
- `state.json` (version 2) leaves out each field at the value every new
  loop holds: its size per loop and its growth per run are bounded; version
  1 files are still read.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from fixed_zone import UTC, zone_of
from hypothesis import given, settings, strategies
from loop_state_support import set_fields

from conftest import CLI, imported_modules, in_process, loopctl_argv
from loopctl.domain import timestamps
from loopctl.domain.model import LoopDef
from loopctl.domain.state import LoopState, common_values, new_loop_state, unpack
from loopctl.storage import defs_cache, home_key
from loopctl.storage.statefile import read_state_file
from loopctl.storage.store import Store


def hand_written(home: Path, count: int, extra: str = "") -> bytes:
    """A loops.yaml as a person writes it: no driver has seen it."""
    home.mkdir(parents=True, exist_ok=True)
    text = "version: 1\nloops:\n" + "".join(
        f"  job{i:03d}:\n    prompt: p\n    command: [\"true\"]\n    every: 1h\n    after: 1h\n"
        for i in range(count)) + extra
    (home / "loops.yaml").write_text(text)
    return text.encode()


def listed(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert proc.returncode == 0, proc.stderr
    return [loop["name"] for loop in json.loads(proc.stdout)["loops"]]


# -- a reading command keeps the parsed copy --------------------------------------


def unsealed(home: Path, data: bytes) -> bytes:
    """The cache's payload: loopctl seals it with the home's key (issue 25)."""
    key = home_key.load(home / "state")
    assert key is not None, "no home key beside a sealed cache"
    payload = defs_cache.unseal(key, data)
    assert payload is not None, "the cache is not sealed with the home's key"
    return payload


def test_ls_of_a_hand_written_file_saves_the_parsed_copy_and_writes_nothing_else(
        home: Path) -> None:
    source = hand_written(home, 3)
    assert not (home / "state").exists()
    assert listed(in_process("ls", "--json")) == ["job000", "job001", "job002"]
    cache = home / "state" / "defs-cache.json"
    assert cache.is_file(), "the parsed copy was not saved"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600
    assert stat.S_IMODE((home / "state").stat().st_mode) == 0o700
    # The copy and the key it is sealed with (made with it); nothing else.
    assert sorted(p.name for p in (home / "state").iterdir()) == ["defs-cache.json", "home.key"]
    assert (home / "loops.yaml").read_bytes() == source
    parsed = defs_cache.decode(unsealed(home, cache.read_bytes()), defs_cache.digest(source))
    assert parsed is not None and parsed.names == ["job000", "job001", "job002"]


@pytest.mark.parametrize("command", [["ls"], ["status", "job001"]], ids=" ".join)
def test_the_next_read_of_a_hand_written_file_needs_no_yaml(home: Path,
                                                            command: list[str]) -> None:
    hand_written(home, 3)
    first = imported_modules(*command)
    assert "yaml" in first, "the first read must parse the file"
    again = imported_modules(*command)
    assert not [m for m in again if m.split(".")[0] == "yaml"], "parsed again"


def test_an_edit_after_the_copy_is_seen_and_the_copy_rebuilt(home: Path) -> None:
    hand_written(home, 2)
    assert listed(in_process("ls", "--json")) == ["job000", "job001"]
    source = hand_written(home, 3)
    assert listed(in_process("ls", "--json")) == ["job000", "job001", "job002"]
    cache = (home / "state" / "defs-cache.json").read_bytes()
    assert defs_cache.decode(unsealed(home, cache), defs_cache.digest(source)) is not None


@pytest.mark.parametrize("damage", ["garbage", "stale-key", "symlink"])
def test_a_damaged_copy_is_ignored_and_rebuilt_by_ls(home: Path, tmp_path: Path,
                                                     damage: str) -> None:
    source = hand_written(home, 2)
    in_process("ls")
    cache = home / "state" / "defs-cache.json"
    key = home_key.load(home / "state")
    assert key is not None
    doc = json.loads(unsealed(home, cache.read_bytes()))
    if damage == "garbage":
        cache.write_bytes(b"\x00{half a file")
    elif damage == "stale-key":
        # A copy made from other bytes, showing a loop this file does not have.
        doc["names"].append("planted")
        doc["loops"].append(dict(doc["loops"][0], name="planted"))
        doc["key"] = defs_cache.digest(b"version: 1\nloops: {}\n")
        cache.write_bytes(defs_cache.seal(key, json.dumps(doc).encode()))
    else:
        target = tmp_path / "outside.json"
        target.write_text(json.dumps(doc))
        cache.unlink()
        cache.symlink_to(target)
    assert listed(in_process("ls", "--json")) == ["job000", "job001"]
    assert not cache.is_symlink(), "the copy was written through a planted link"
    rebuilt = defs_cache.decode(unsealed(home, cache.read_bytes()), defs_cache.digest(source))
    assert rebuilt is not None and rebuilt.names == ["job000", "job001"]
    if damage == "symlink":
        assert json.loads(target.read_text()) == doc, "the link's target was written"


def test_a_copy_is_never_saved_for_a_file_with_notification_tokens(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "loops.yaml").write_text(
        'version: 1\nnotify: ["json://127.0.0.1:9/TOKEN"]\nloops:\n'
        '  job000:\n    prompt: p\n    command: ["true"]\n    every: 1h\n')
    assert listed(in_process("ls", "--json")) == ["job000"]
    assert not (home / "state" / "defs-cache.json").exists()


def test_ls_in_a_read_only_state_folder_still_lists(home: Path) -> None:
    hand_written(home, 2)
    (home / "state").mkdir(mode=0o500)
    try:
        if os.access(home / "state", os.W_OK):
            pytest.skip("running as a user whom permissions do not stop")
        assert listed(in_process("ls", "--json")) == ["job000", "job001"]
        assert list((home / "state").iterdir()) == []
    finally:
        (home / "state").chmod(0o700)


def test_reading_commands_beside_writers_never_show_a_wrong_list(cli: CLI, home: Path) -> None:
    """`ls` saves its copy without the lock while `start`s rewrite the file:
    whatever copy survives, every later read lists exactly loops.yaml."""
    hand_written(home, 20)
    env = dict(os.environ)
    procs = []
    for i in range(6):
        procs.append(subprocess.Popen(loopctl_argv("ls"), env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True))
        procs.append(subprocess.Popen(
            loopctl_argv("start", "--name", f"new{i}", "--every", "1h", "--after", "1h",
                         "--command", "true", "p"),
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    import yaml

    truth = sorted(yaml.safe_load((home / "loops.yaml").read_text())["loops"])
    assert len(truth) == 26
    assert sorted(listed(cli("ls", "--json"))) == truth
    assert sorted(listed(in_process("ls", "--json"))) == truth
    assert not list((home / "state").glob(".*.tmp")), "a temporary file was left"
    out = json.loads(cli("tick", "--json").stdout)
    assert out["fired"] == []


# -- state.json: what it holds -----------------------------------------------------


def test_an_idle_loop_costs_a_bounded_number_of_bytes(cli: CLI, home: Path) -> None:
    hand_written(home, 50)
    cli("tick")
    data = (home / "state" / "state.json").read_bytes()
    raw = json.loads(data)
    assert raw["version"] == 2
    entry = raw["loops"]["job007"]
    # Only what the definition decides: every other field is at the value
    # every new loop starts with, and left out.
    assert sorted(entry) == ["created", "deadline", "next_due", "schedule_key", "status"]
    per_loop = len(data) / 50
    assert per_loop < 160, per_loop
    assert cli.state()["loops"]["job007"]["iterations"] == 0


def one_width(value: Any) -> Any:
    if isinstance(value, float):
        return 0.5
    if isinstance(value, dict):
        return {k: one_width(v) for k, v in value.items()}
    if isinstance(value, list):
        return [one_width(v) for v in value]
    return value


def test_runs_grow_a_loop_entry_by_a_bounded_amount(cli: CLI, home: Path) -> None:
    hand_written(home, 2)
    state = home / "state" / "state.json"
    sizes = []
    for _ in range(12):
        cli("run", "job000", check=0)
        entry = json.loads(state.read_bytes())["loops"]["job000"]
        # A float's repr is 3 to 18 characters (a time, the tally's sum of
        # durations), so floats are measured at one width, at any depth:
        # only what a run adds counts.
        sizes.append(len(json.dumps(one_width(entry))))
    # The recent outcomes are capped at 10: past them a run adds nothing
    # (the counters' digits aside).
    assert max(sizes[10:]) - sizes[10] <= 4, sizes
    assert sizes[-1] < 600, sizes
    assert cli.state()["loops"]["job000"]["iterations"] == 12


def test_a_version_1_state_is_read_and_rewritten_as_version_2(cli: CLI, home: Path) -> None:
    hand_written(home, 2)
    cli("tick")
    state_file = home / "state" / "state.json"
    full = read_state_file(state_file)
    full["version"] = 1
    full["loops"]["job001"]["iterations"] = 7
    state_file.write_text(json.dumps(full))
    (home / "state" / "summary.json").unlink()
    assert cli.json("status", "job001")["runs"]["used"] == 7
    cli("pause", "job000")
    raw = json.loads(state_file.read_bytes())
    assert raw["version"] == 2 and raw["loops"]["job001"]["iterations"] == 7
    assert "failures" not in raw["loops"]["job001"]


def test_a_version_2_entry_missing_what_its_definition_decides_is_repaired(
        cli: CLI, home: Path) -> None:
    hand_written(home, 2)
    cli("tick")
    state_file = home / "state" / "state.json"
    raw = json.loads(state_file.read_bytes())
    del raw["loops"]["job001"]["schedule_key"]
    state_file.write_text(json.dumps(raw))
    info = cli.json("status", "job001")
    assert info["status"] == "paused" and info["reason"] == "error", info
    assert "schedule_key" in info["note"]
    assert cli.json("status", "job000")["status"] == "active"


def probe_entry() -> LoopState:
    return new_loop_state(LoopDef(name="x", every=60), 1000.0, zone=UTC)


def test_to_json_leaves_out_only_common_values_and_unpack_restores_them() -> None:
    st = probe_entry()
    set_fields(st, iterations=3, note="hello", outcomes=["ok"], pending=True, cost_usd=0.5)
    packed = st.to_json()
    assert packed["iterations"] == 3 and packed["outcomes"] == ["ok"]
    assert "failures" not in packed and "results" not in packed
    assert unpack(json.loads(json.dumps(packed))) == vars(st)
    # A value equal to the common one but of another type is not left out.
    st.pending = 0
    assert st.to_json()["pending"] == 0


def test_unpacked_entries_never_share_a_mutable_value() -> None:
    a, b = unpack({"status": "active"}), unpack({"status": "active"})
    a["outcomes"].append("ok")
    a["results"].append("x")
    assert b["outcomes"] == [] and b["results"] == []
    assert common_values()["outcomes"] == []


def test_every_field_of_a_new_entry_is_packed_or_per_loop() -> None:
    """A field added to new_loop_state is left out at its common value with
    no edit to pack: the schema is written once."""
    st = probe_entry()
    assert set(st.to_json()) == {"status", "created", "deadline", "schedule_key", "next_due"}
    assert set(common_values()) | set(st.to_json()) == set(vars(st))


def test_store_round_trip_keeps_every_field(home: Path) -> None:
    hand_written(home, 1)
    store = Store()
    with store.lock():
        defs = store.read_defs()
        state = store.read_state()
        from loopctl.domain import lifecycle

        lifecycle.reconcile(defs.loops, defs.invalid, state, 1000.0, zone_of)
        state["loops"]["job000"].note = "kept"
        store.write_state(state)
    again = Store().read_state()
    assert again["loops"]["job000"] == state["loops"]["job000"]


WHOLE = strategies.integers(min_value=0, max_value=2**34)


# Halfway cases of the microsecond rounding on both sides of a second.
@settings(max_examples=300, deadline=None)
@given(strategies.one_of(strategies.floats(min_value=0, max_value=2**34),
                         WHOLE.map(lambda s: s + 0.9999995), WHOLE.map(lambda s: s - 5e-7)))
def test_iso_is_what_datetime_writes(ts: float) -> None:
    expected = datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert timestamps.iso(ts) == expected


def test_status_of_one_loop_says_what_ls_says_of_it(cli: CLI, home: Path) -> None:
    """`status NAME` reconciles that loop alone: it must describe it exactly
    as the listing does, also for a loop no driver has seen yet."""
    hand_written(home, 3)
    cli("tick")
    with (home / "loops.yaml").open("a") as handle:
        handle.write("  late:\n    prompt: p\n    command: [\"true\"]\n    every: 10m\n")
    cli("pause", "job001")

    def steady(info: dict[str, Any]) -> dict[str, Any]:
        info.pop("version", None)
        info.pop("deadline_remaining_s")  # counts down between the two commands
        return info

    listing = {loop["name"]: steady(loop) for loop in cli.json("ls")["loops"]}
    assert sorted(listing) == ["job000", "job001", "job002", "late"]
    for name in ("job001", "late", "job002"):
        assert steady(cli.json("status", name)) == listing[name], name


def test_a_reading_command_that_fails_on_a_damaged_state_writes_nothing(home: Path) -> None:
    hand_written(home, 2)
    (home / "state").mkdir(mode=0o700)
    (home / "state" / "state.json").write_bytes(b"{not json")
    proc = in_process("ls")
    assert proc.returncode == 3, proc.stderr
    assert sorted(p.name for p in (home / "state").iterdir()) == ["state.json"]
