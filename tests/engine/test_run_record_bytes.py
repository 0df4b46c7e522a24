"""The run record's files are what loopctl has always written, byte for
byte (issue 52 item 2: the record became a typed record; tests and users diff
these files). Real `loopctl run`s with the fake agent (ok, failed, a failed
check after a gate, a gate that skipped) and a run found lost after its
supervisor was killed; tests/samples/run_records.txt is what main wrote for
the same scenarios (`python -m tests.run_record_scenarios HOME` run by
main's checkout), times, run ids, paths and pids replaced."""

from __future__ import annotations

from pathlib import Path

from tests import run_record_scenarios as scenarios

GOLDEN = Path(__file__).parent.parent / "samples" / "run_records.txt"


def test_every_record_file_is_byte_for_byte_what_main_wrote(tmp_path: Path) -> None:
    home = tmp_path / "loopctl"
    scenarios.run_all(home)
    made = scenarios.normalized(home).decode()
    assert made == GOLDEN.read_text(), made
