"""A loop whose working directory is gone (removed after `start`, a
hand-written loops.yaml): `validate` and `doctor` name it, and the run's
reason says it as it is, not as a program missing from PATH (issue 51
item 2)."""

from __future__ import annotations

from pathlib import Path

from conftest import CLI


def test_a_missing_working_directory_is_named_everywhere(cli: CLI, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    cli("start", "--name", "w", "--every", "1h", "--cwd", str(work), "echo hi", check=0)
    work.rmdir()
    said = f"working directory {work} does not exist"
    checked = cli("validate", check=0).stdout  # still a valid entry: a warning
    assert f"warning: loop 'w': {said}" in checked, checked
    assert cli.json("validate")["warnings"] == [f"loop 'w': {said}"]
    doctor = cli("doctor").stdout
    assert f"cwd: loop 'w': {said}" in doctor, doctor
    cli("run", "w", check=1)
    [record] = cli.records("w")
    assert record["note"] == said and "PATH" not in record["note"]
    assert cli.json("status", "w")["last_run"]["reason"] == said
    work.write_text("")  # a file where the folder was
    assert f"working directory {work} is not a folder" in cli("doctor").stdout
