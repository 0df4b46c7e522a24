"""The store's files at their edges (DESIGN §2, §11): a broken loops.yaml or
state.json fails closed with the path (and the line), a write that cannot
happen leaves the previous file whole, non-finite numbers are never written,
and removing a loop's runs never follows a symlink. In-process, against the
test's own LOOPCTL_HOME."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from loopctl.domain.errors import LoopctlError, UnreadableError
from loopctl.storage.atomic import atomic_write, strict_json
from loopctl.storage.definitions import load_yaml_doc
from loopctl.storage.store import Store

GOOD_LOOP = "  job:\n    prompt: p\n    command: 'true'\n    every: 1h\n"


def write_loops(home: Path, text: str) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    path = home / "loops.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("text", "message"), [
    ("version: 1\non_attention: 5\nloops:\n" + GOOD_LOOP,
     "loops.yaml, line 2: 'on_attention' must be a path"),
    ("version: 1\nloops:\n" + GOOD_LOOP + "notify: [5]\n",
     "loops.yaml, line 7: top level: 'notify' must be a list of Apprise URLs"),
    ("version: 1\nnotify: ntfy://a b\nloops: {}\n",
     "loops.yaml, line 2: top level: 'notify' must be a list of Apprise URLs"),
    ("version: 1\nloops:\n  - job\n", "loops.yaml, line 2: 'loops' must be a mapping"),
    ("version: 1\nschedules: {}\nloops: {}\n",
     "loops.yaml, line 2: unknown top-level key 'schedules'"),
    ("version: 1\nloops: {}\nmax_concurent: 2\n",
     "loops.yaml, line 3: unknown top-level key 'max_concurent' "
     "(did you mean 'max_concurrent'?)"),
    ("  \n\n", "loops.yaml: empty; expected 'version: 1' and 'loops:'"),
], ids=["hook-not-text", "notify-not-urls", "notify-url-with-space", "loops-a-list",
        "unknown-key", "near-miss-key", "blank"])
def test_a_broken_top_level_fails_closed_naming_the_line(home: Path, text: str,
                                                         message: str) -> None:
    path = write_loops(home, text)
    with pytest.raises(UnreadableError) as info:
        Store().read_defs()
    assert info.value.message.startswith(str(path.parent) + "/" + message), info.value.message
    assert info.value.code == 3
    assert path.read_text() == text


def test_a_folder_in_place_of_loops_yaml_fails_closed(home: Path) -> None:
    (home / "loops.yaml").mkdir(parents=True)
    with pytest.raises(UnreadableError, match=r"loops\.yaml: cannot read: Is a directory$"):
        Store().read_defs()


def test_reading_a_definitions_file_that_does_not_exist_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.yaml"
    with pytest.raises(UnreadableError) as info:
        load_yaml_doc(missing)
    assert info.value.message == f"{missing}: cannot read: No such file or directory"


@pytest.mark.parametrize(("damage", "message"), [
    ("folder", "cannot read state: Is a directory"),
    (b'{"version": 1, "loops": null}', "state has no 'loops' mapping; move it aside"),
    (b'{"version": 1}', "state has no 'loops' mapping; move it aside"),
], ids=["folder", "loops-null", "no-loops"])
def test_a_broken_state_file_fails_closed(home: Path, damage: str | bytes,
                                          message: str) -> None:
    state_file = home / "state" / "state.json"
    if damage == "folder":
        state_file.mkdir(parents=True)
    else:
        state_file.parent.mkdir(parents=True)
        state_file.write_bytes(damage)  # type: ignore[arg-type]
    with pytest.raises(UnreadableError) as info:
        Store().read_state()
    assert info.value.message.startswith(f"{state_file}: {message}"), info.value.message


def test_non_finite_numbers_are_never_written(home: Path) -> None:
    store = Store()
    state = store.read_state()
    store.write_state(state)
    before = store.paths.state_file.read_bytes()
    state["note"] = math.nan
    with pytest.raises(LoopctlError, match="refusing to write a non-finite number"):
        store.write_state(state)
    assert store.paths.state_file.read_bytes() == before
    with pytest.raises(LoopctlError, match="refusing to write a non-finite number"):
        strict_json({"cost_usd": math.inf})
    assert strict_json({"b": 1, "a": [1.5]}) == '{"a":[1.5],"b":1}'


def test_a_write_into_a_folder_that_is_gone_fails_and_changes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "gone" / "state.json"
    with pytest.raises(LoopctlError) as info:
        atomic_write(target, b"{}")
    assert info.value.message == (f"cannot write {target}: No such file or directory; "
                                  "the previous file is unchanged")
    assert not (tmp_path / "gone").exists()


def test_an_atomic_write_replaces_the_whole_file_private_and_leaves_no_temp(
        tmp_path: Path) -> None:
    folder = tmp_path / "files"
    folder.mkdir()
    target = folder / "f.json"
    target.write_text("old contents that are longer than the new ones\n")
    os.chmod(target, 0o644)
    atomic_write(target, b"new\n")
    atomic_write(target, b"newer\n", durable=False)
    assert target.read_bytes() == b"newer\n"
    assert oct(target.stat().st_mode & 0o777) == "0o600"
    assert sorted(p.name for p in folder.iterdir()) == ["f.json"]


def test_removing_runs_unlinks_a_symlink_in_place_of_the_folder(home: Path,
                                                                tmp_path: Path) -> None:
    store = Store()
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.json").write_text("{}")
    folder = store.paths.loop_runs_dir("job")
    folder.parent.mkdir(parents=True)
    folder.symlink_to(precious)
    store.remove_runs("job")
    assert not folder.is_symlink() and (precious / "keep.json").exists()
    store.remove_runs("job")  # nothing left: nothing to do


def test_removing_runs_when_the_runs_folder_is_a_file_is_an_error(home: Path) -> None:
    store = Store()
    store.paths.runs_dir.parent.mkdir(parents=True)
    store.paths.runs_dir.write_text("not a folder")
    with pytest.raises(LoopctlError, match=r"^cannot remove .*/runs/job: Not a directory$"):
        store.remove_runs("job")


def test_a_json_file_outside_the_run_folders_gets_its_folders_made(home: Path) -> None:
    store = Store()
    path = store.paths.state_dir / "exports" / "deep" / "x.json"
    store.write_json(path, {"b": 2, "a": 1})
    assert json.loads(path.read_text()) == {"a": 1, "b": 2}
    assert path.read_text().endswith("\n")


def test_removing_a_loop_the_definitions_do_not_have_changes_nothing(home: Path) -> None:
    write_loops(home, "version: 1\nloops:\n" + GOOD_LOOP)
    defs = Store().read_defs()
    defs.remove("ghost")
    assert defs.names == ["job"] and defs.has("job")
    defs.remove("job")
    assert defs.names == [] and not defs.has("job")
