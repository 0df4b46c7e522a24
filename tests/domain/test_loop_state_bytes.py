"""state.json is what loopctl has always written, byte for byte (issue 52
item 2: a loop's entry became the LoopState record). Real `loopctl`
processes with the fake agent (tests/state_scenarios: runs ok, failed, a
failed check, a gate that skipped, a lost run, then pause, resume, stop, a
second run, a hand-damaged entry repaired and resumed);
tests/samples/state_files.txt is what main wrote for the same steps
(`python -m tests.state_scenarios HOME` run by main's checkout), times, run
ids, pids, durations and paths replaced."""

from __future__ import annotations

from pathlib import Path

from tests import state_scenarios as scenarios

GOLDEN = Path(__file__).parent.parent / "samples" / "state_files.txt"


def test_every_state_file_is_byte_for_byte_what_main_wrote(tmp_path: Path) -> None:
    made = scenarios.run_all(tmp_path / "loopctl").decode()
    assert made == GOLDEN.read_text(), made
