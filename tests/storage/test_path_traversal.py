"""Names and run ids never escape the home (DESIGN §11: names typed by users
are untrusted; paths resolve under their own directory).

A "precious" directory sits beside the home (`<tmp>/precious`, which
`<home>/state/runs/../../../precious` reaches). No command given a hostile
name or run id may read from it, write to it or delete it, nor touch another
loop's runs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from hostile.support import install, make_template, no_traceback, snapshot

from conftest import CLI

# What is checked is where files land, the same in-process as in a process;
# `run` (as every driver) is a real process.

SENTINEL = "PRECIOUS-SENTINEL-5c1e"
LOG_NAME = "20260101T000000Z-0001"
ABS = "<absolute path of precious>"


@pytest.fixture(scope="module")
def with_real(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with one loop `real` that has run once."""
    return make_template(
        tmp_path_factory,
        ["start", "p", "--name", "real", "--every", "1h", "--command", "true"],
        ["run", "real"])


@pytest.fixture
def precious(tmp_path: Path, home: Path, with_real: Path) -> Path:
    """The home (copied from the template) and a precious dir beside it,
    holding files a traversal would find: a log, a record, a plain file."""
    install(with_real, home)
    folder = tmp_path / "precious"
    folder.mkdir()
    (folder / "keep.txt").write_text(SENTINEL)
    (folder / f"{LOG_NAME}.log").write_text(SENTINEL + " log\n")
    (folder / f"{LOG_NAME}.json").write_text(
        json.dumps({"run_id": LOG_NAME, "outcome": "ok", "note": SENTINEL}))
    (folder / "x.log").write_text(SENTINEL + " x\n")
    assert (home / "state" / "runs" / ".." / ".." / ".." / "precious").resolve() == folder
    return folder


def untouched(before: dict[str, object], folder: Path) -> None:
    assert folder.is_dir(), f"{folder} was removed"
    assert snapshot(folder) == before


NAMES = [
    pytest.param("..", id="dotdot"),
    pytest.param("../..", id="dotdot-dotdot"),
    pytest.param("../../../precious", id="to-precious"),
    pytest.param(ABS, id="absolute"),
    pytest.param("a/b", id="slash"),
    pytest.param(".hidden", id="hidden"),
    pytest.param("-rf", id="dash-rf"),
]
COMMANDS = [
    pytest.param(["rm", "NAME"], id="rm"),
    pytest.param(["show", "NAME"], id="show"),
    pytest.param(["status", "NAME"], id="status"),
    pytest.param(["pause", "NAME"], id="pause"),
    pytest.param(["resume", "NAME"], id="resume"),
    pytest.param(["stop", "NAME"], id="stop"),
    pytest.param(["update", "NAME", "--max-runs", "5"], id="update"),
    pytest.param(["run", "NAME"], id="run"),
    pytest.param(["logs", "NAME"], id="logs"),
    pytest.param(["history", "NAME"], id="history"),
    pytest.param(["export", "NAME", "--to", "crontab"], id="export"),
]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_hostile_name_never_escapes(cli: CLI, home: Path, precious: Path,
                                      command: list[str], name: str) -> None:
    if name == ABS:
        name = str(precious)
    outside, real = snapshot(precious), snapshot(home / "state" / "runs" / "real")
    state_dir = snapshot(home / "state")
    proc = cli(*[name if arg == "NAME" else arg for arg in command])
    no_traceback(proc)
    assert proc.returncode in (2, 4), (proc.returncode, proc.stdout, proc.stderr)
    assert SENTINEL not in proc.stdout
    untouched(outside, precious)
    assert snapshot(home / "state" / "runs" / "real") == real
    # Nothing of the home's own state went either (`..` is the state dir).
    assert set(snapshot(home / "state")) >= {k for k in state_dir if not k.startswith(".")}


def test_rm_of_a_hand_written_traversal_entry_removes_only_the_entry(
        cli: CLI, home: Path, precious: Path) -> None:
    defs_file = home / "loops.yaml"
    doc = yaml.safe_load(defs_file.read_text())
    doc["loops"]["../../../precious"] = {"prompt": "p", "command": "true", "every": "1h"}
    defs_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    listed = {loop["name"]: loop for loop in cli.json("ls")["loops"]}
    assert listed["../../../precious"]["status"] == "invalid"
    outside, real = snapshot(precious), snapshot(home / "state" / "runs" / "real")

    proc = cli("rm", "../../../precious")
    no_traceback(proc)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "../../../precious" not in yaml.safe_load(defs_file.read_text())["loops"]
    assert "real" in yaml.safe_load(defs_file.read_text())["loops"]
    untouched(outside, precious)
    assert snapshot(home / "state" / "runs" / "real") == real


RUN_IDS = [
    pytest.param("../../x", id="up-to-state"),
    pytest.param("..", id="dotdot"),
    pytest.param("/etc/passwd", id="absolute"),
    pytest.param("20261130T031500Z-0007/../../x", id="inside-then-up"),
    pytest.param("../../../../precious/x", id="to-precious"),
]


@pytest.mark.parametrize("command", ["logs", "history"])
@pytest.mark.parametrize("run_id", RUN_IDS)
def test_a_hostile_run_id_never_reads_outside(cli: CLI, home: Path, precious: Path,
                                              run_id: str, command: str) -> None:
    runs = home / "state" / "runs"
    # What each traversal would reach from runs/real/<id>.log:
    (home / "state" / "x.log").write_text(SENTINEL + " state\n")  # ../../x
    (runs / "x.log").write_text(SENTINEL + " runs\n")  # 0007/../../x
    (runs / "real" / "20261130T031500Z-0007").mkdir()
    outside, real = snapshot(precious), snapshot(runs / "real")
    argv = ["logs", "real", "--run", run_id] if command == "logs" else ["history", run_id]
    proc = cli(*argv)
    no_traceback(proc)
    assert proc.returncode in (2, 4), (proc.returncode, proc.stdout, proc.stderr)
    assert SENTINEL not in proc.stdout
    assert "root:" not in proc.stdout
    untouched(outside, precious)
    assert snapshot(runs / "real") == real


@pytest.fixture
def planted(cli: CLI, tmp_path: Path) -> tuple[Path, Path]:
    """Loop `linked` whose runs directory is a symlink to a dir outside the home."""
    cli("start", "p", "--name", "linked", "--every", "1h", "--command", "true", check=0)
    target = tmp_path / "outside"
    target.mkdir()
    (target / "keep.txt").write_text(SENTINEL)
    link = cli.state_dir / "runs" / "linked"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target, target_is_directory=True)
    return link, target


@pytest.mark.parametrize("driver", ["run", "tick"])
def test_a_planted_runs_symlink_is_never_written_through(
        cli: CLI, planted: tuple[Path, Path], driver: str) -> None:
    link, target = planted
    before = snapshot(target)
    if driver == "run":
        proc = cli("run", "linked")
        no_traceback(proc)
        assert proc.returncode != 0, (proc.stdout, proc.stderr)
        assert proc.stderr.strip(), "refused without a word"
    else:
        proc = cli("tick", "--wait")
        no_traceback(proc)
        assert proc.returncode in (0, 1), (proc.returncode, proc.stdout, proc.stderr)
    assert snapshot(target) == before
    assert link.is_symlink()

    rm = cli("rm", "linked")
    no_traceback(rm)
    assert rm.returncode == 0, (rm.stdout, rm.stderr)
    assert not os.path.lexists(link), "rm left the symlink"
    assert snapshot(target) == before
