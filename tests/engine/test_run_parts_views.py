"""What `history --json` and `status --json` show of a run's typed parts
(its gate, its check, --until-check's decision, the state's last check) is
byte for byte what main showed (issue 52 item 2): real `loopctl run`s with
the fake agent and real check commands; tests/samples/run_parts_views.txt
is main's output for the same scenarios (tests/run_parts_scenarios.py)."""

from __future__ import annotations

from pathlib import Path

from tests import run_parts_scenarios as scenarios

GOLDEN = Path(__file__).parent.parent / "samples" / "run_parts_views.txt"


def test_the_views_of_checked_and_gated_runs_are_what_main_showed(tmp_path: Path) -> None:
    home = tmp_path / "loopctl"
    scenarios.run_all(home)
    shown = scenarios.views(home).decode()
    assert shown == GOLDEN.read_text(), shown
