"""Sizes (`--max-log`, `--max-memory`) and the bounds' options in a definition."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import CLI
from loopctl.domain.errors import UsageError
from loopctl.domain.loop_raw import to_raw
from loopctl.domain.model import DEFAULT_MAX_LOG, parse_loop
from loopctl.domain.sizes import format_size, parse_size


@pytest.mark.parametrize(("text", "value"), [
    ("100MiB", 100 * 2**20), ("512k", 512 * 1024), ("2G", 2 * 2**30), ("4096", 4096),
    (4096, 4096), ("1 GiB", 2**30), ("3kb", 3072), ("1T", 2**40)])
def test_sizes_parse(text: object, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "1.5G", "-1", "10X", "²", True, None, 1.0, "1PiB", "0"])
def test_bad_sizes_say_what_was_expected(text: object) -> None:
    with pytest.raises(UsageError) as caught:
        parse_size(text)
    assert "\n" not in caught.value.message
    assert "size" in caught.value.message or "at least" in caught.value.message


@pytest.mark.parametrize("value", [1, 1023, 4096, 100 * 2**20, 2**30 + 1, 3 * 2**40])
def test_format_size_reads_back(value: int) -> None:
    assert parse_size(format_size(value)) == value


def test_bounds_round_trip_through_loops_yaml() -> None:
    raw = {"prompt": "p", "command": ["true"], "every": "1h",
           "max_log": "1MiB", "max_memory": "2G", "max_procs": 64}
    loop = parse_loop("b", raw)
    assert (loop.max_log, loop.max_memory, loop.max_procs) == (2**20, 2 * 2**30, 64)
    assert parse_loop("b", to_raw(loop)) == loop
    plain = parse_loop("p", {"prompt": "p", "command": ["true"], "every": "1h"})
    assert plain.max_log == DEFAULT_MAX_LOG and "max_log" not in to_raw(plain)


@pytest.mark.parametrize(("option", "value", "expected"), [
    ("--max-log", "1k", "at least 4KiB"), ("--max-log", "lots", "expected a size"),
    ("--max-memory", "1M", "at least 16MiB"), ("--max-procs", "0", "whole number >= 1")])
def test_a_bad_bound_on_the_command_line_exits_2_in_one_line(
        cli: CLI, option: str, value: str, expected: str) -> None:
    proc = cli("start", "p", "--name", "b", "--every", "1h", "--command", "true", option, value)
    assert proc.returncode == 2 and expected in proc.stderr, proc
    assert len(proc.stderr.strip().splitlines()) == 1
    assert cli.json("ls")["loops"] == []  # nothing written


def test_start_says_which_bounds_this_machine_cannot_enforce(cli: CLI) -> None:
    from loopctl.engine.containment.cgroup import limits_here

    proc = cli("start", "p", "--name", "b", "--every", "1h", "--command", "true",
               "--max-memory", "1G", "--max-procs", "100", check=0)
    for name, option in (("memory", "--max-memory"), ("pids", "--max-procs")):
        assert (f"{option} cannot be enforced here" in proc.stderr) is bool(limits_here()[name])


def test_doctor_says_which_bounds_this_machine_enforces(cli: CLI) -> None:
    from loopctl.engine.containment.cgroup import base_cgroup, limits_here

    cli("start", "p", "--name", "b", "--every", "1h", "--command", "true",
        "--max-memory", "1G", check=0)
    cli("pause", "b", check=0)  # an active loop with no driver fails doctor (issue 29)
    found = cli.json("doctor")["findings"]
    bounds = [f for f in found if f["check"] == "bounds"]
    assert any(("cgroup under" in f["message"]) is (base_cgroup()[0] is not None)
               for f in bounds), bounds
    memory = [f for f in bounds if "--max-memory" in f["message"]]
    if limits_here()["memory"]:
        assert memory and memory[0]["level"] == "warn" and "(set for b)" in memory[0]["message"]
    else:
        assert not memory
    assert [f["level"] for f in found if f["check"] == "disk"] == ["ok"]


def test_limits_are_written_into_the_runs_cgroup(tmp_path: Path) -> None:
    from loopctl.engine.containment.cgroup import Containment, apply_limits

    folder = tmp_path / "loopctl-run"
    folder.mkdir()
    held = Containment("mark", str(folder))
    assert apply_limits(held, 2**30, 64) == []
    assert (folder / "memory.max").read_text() == str(2**30)
    assert (folder / "pids.max").read_text() == "64"
    unheld = Containment("mark", None, "no cgroup v2 hierarchy is mounted")
    notes = apply_limits(unheld, 2**30, None)
    assert notes == ["--max-memory not enforced: no cgroup v2 hierarchy is mounted"]
