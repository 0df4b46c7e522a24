"""LoopState as a record (issue 52 item 2): what it reads, what it writes,
what it refuses. The bytes it writes are tests/domain/test_loop_state_bytes.py's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loopctl.domain.model import parse_loop
from loopctl.domain.state import LoopState, common_values
from loopctl.domain.timestamps import UTC

NOW = 1_800_000_000.0
ROOT = Path(__file__).resolve().parents[2]


def fresh() -> LoopState:
    loop = parse_loop("x", {"prompt": "p", "command": ["true"], "every": "1h"})
    return LoopState.fresh(loop, NOW, zone=UTC)


def test_what_it_writes_reads_back_as_the_same_record() -> None:
    st = fresh()
    st.iterations, st.outcomes, st.note = 3, ["ok", "failed"], "a note"
    written = json.loads(json.dumps(st.to_json()))
    assert "run" not in written and written["iterations"] == 3  # at its common value: left out
    again = LoopState.from_written(written)
    assert again == st and list(vars(again)) == list(common_values()) + [
        "status", "created", "deadline", "schedule_key", "next_due"]
    assert again.outcomes is not common_values()["outcomes"]


def test_the_record_declares_every_field_and_no_other() -> None:
    """A mistyped field would otherwise become one that state.json keeps
    writing: the record declares exactly SCHEMA's fields and lets no
    attribute through undeclared (no `__getattr__`), so mypy (the lint step,
    CONTRIBUTING.md) names the typo: `"LoopState" has no attribute
    "statuss"; maybe "status"?`."""
    from loopctl.domain.state_rules import SCHEMA

    assert list(LoopState.__annotations__) == list(SCHEMA)
    for hook in ("__getattr__", "__getattribute__", "__setattr__"):
        assert getattr(LoopState, hook, None) is getattr(object, hook, None), hook


@pytest.mark.parametrize("name", ["__getitem__", "__setitem__", "get", "update", "keys",
                                  "items", "__iter__", "__contains__"])
def test_the_record_is_no_mapping(name: str) -> None:
    """Fields are read by attribute (issue 52 item 2): a mapping method
    back on the record would let `st["field"]` reads creep back unchecked."""
    assert not hasattr(LoopState, name)


def test_an_untrusted_record_is_cleaned_into_a_new_one() -> None:
    st = fresh()
    st.iterations = -1  # as a damaged file could hold it
    clean, bad = LoopState.from_json("x", st)
    assert bad == ["iterations"] and clean.iterations == 0 and st.iterations == -1
    assert (clean.status, clean.reason) == ("paused", "error")


def test_a_state_file_of_a_newer_version_is_refused_in_one_line(tmp_path: Path) -> None:
    """Version at the storage edge: a newer loopctl's file is not guessed at."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.json").write_text(json.dumps({"version": 3, "loops": {}}))
    env = dict(os.environ, LOOPCTL_HOME=str(tmp_path), HOME=str(tmp_path), NO_COLOR="1")
    done = subprocess.run([sys.executable, "-m", "loopctl", "pause", "x"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done
    assert "unknown state version 3; expected 2" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
