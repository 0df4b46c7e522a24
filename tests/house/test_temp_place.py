"""The suite's temporary files go where a new entry costs least
(tests/temp_place.py), never against a TMPDIR the user set, and every
worker and test follows the controller's choice."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest
import temp_place


def test_the_cheaper_candidate_becomes_tmpdir(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    cheap, dear, gone = (str(tmp_path / name) for name in ("cheap", "dear", "gone"))
    os.mkdir(cheap)  # gettempdir() takes only a folder that exists
    costs = {dear: 0.02, cheap: 0.0004, gone: None}  # what entry_cost measured
    monkeypatch.delenv("TMPDIR", raising=False)
    monkeypatch.setattr(temp_place, "CANDIDATES", (dear, cheap, gone))
    monkeypatch.setattr(temp_place, "entry_cost", costs.get)
    try:
        line = temp_place.choose()
        assert os.environ["TMPDIR"] == cheap, line
        assert tempfile.gettempdir() == cheap  # not the one cached before
        assert line == (f"temporary files: {cheap} (CPU per new entry: "
                        f"{dear} 0.500 ms, {cheap} 0.010 ms)")
    finally:
        tempfile.tempdir = None  # monkeypatch puts TMPDIR back; read it again


def test_a_tmpdir_the_user_set_is_kept(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert temp_place.choose() == f"temporary files: {tmp_path} (TMPDIR as set)"
    assert os.environ["TMPDIR"] == str(tmp_path)


def test_the_real_probe_measures_each_candidate_and_cleans_up(tmp_path: Path) -> None:
    folder = tmp_path / "candidate"
    folder.mkdir()
    cost = temp_place.entry_cost(str(folder))
    assert cost is not None and cost >= 0
    assert list(folder.iterdir()) == []
    assert temp_place.entry_cost(str(tmp_path / "missing")) is None
    assert "/dev/shm" not in temp_place.CANDIDATES  # a sandboxed run's is empty


def test_this_worker_and_its_tests_follow_the_controllers_choice(
        tmp_path: Path, pytestconfig: pytest.Config) -> None:
    argv = getattr(pytestconfig, "workerinput", {}).get("mainargv", sys.argv)
    if any(arg.startswith("--basetemp") for arg in argv):
        pytest.skip("--basetemp names the folder itself")
    chosen = os.environ.get("TMPDIR")
    assert chosen, "the controller sets TMPDIR when the user did not"
    assert tempfile.gettempdir() == chosen
    assert tmp_path.resolve().is_relative_to(Path(chosen).resolve())
