"""The `tick` fast path falls through to the full path whenever it cannot
prove that nothing is due (loopctl/entry.py `nothing_due`).

The fast path reads only `state.json`'s summary. On a state file that is
damaged it must not exit 0 as if nothing were due: the full path reports it
like any command does (exit 3, one line) and leaves the file alone. On a
`loops.yaml` edited after the last state write it must not trust the
summary: the full path reads the new definitions and fires what they make due.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from faults.support import one_clear_line

from conftest import CLI, FAKE_AGENT, agent_command, imported_modules, wait_for
from loopctl.entry import nothing_due


def settled_home(cli: CLI) -> None:
    """A home whose only loop is due in an hour, reconciled by a tick: the
    state the fast path answers from without looking further."""
    cli("start", "p", "--name", "later", "--every", "1h", "--after", "1h",
        "--command", agent_command(), check=0)
    cli("tick", check=0)
    assert nothing_due(), "the control: an intact state takes the fast path"


DAMAGE = {
    "truncated": lambda good: good[: len(good) // 2],
    "empty": lambda good: b"",
    "garbage": lambda good: b"\x00\x7fELF not json at all",
    "not-utf8": lambda good: good.replace(b'"version"', b'"v\xffersion"'),
    "a-json-list": lambda good: b"[1, 2, 3]",
}


@pytest.mark.parametrize("flags", [(), ("--quiet",)], ids=["tick", "tick-quiet"])
@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_state_file_is_reported_by_the_full_path(
        cli: CLI, damage: str, flags: tuple[str, ...]) -> None:
    settled_home(cli)
    state_file = cli.state_dir / "state.json"
    damaged = DAMAGE[damage](state_file.read_bytes())
    state_file.write_bytes(damaged)
    proc = cli("tick", *flags)
    assert proc.returncode == 3, (proc.returncode, proc.stdout, proc.stderr)
    line = one_clear_line(proc.stderr)
    assert line.startswith("loopctl: error: ") and str(state_file) in line, line
    assert state_file.read_bytes() == damaged, "failing closed: the file is left as it was"
    assert not nothing_due()  # the fast path itself declined to answer


def test_a_loops_yaml_edited_after_the_last_state_write_is_read(cli: CLI) -> None:
    settled_home(cli)
    loops = cli.home / "loops.yaml"
    # A hand edit (no loopctl command, so no state write): a loop due now.
    command = json.dumps([sys.executable, str(FAKE_AGENT), "--print", "hand-made ran"])
    loops.write_text(loops.read_text() + "  handmade:\n    prompt: p\n    every: 1h\n"
                     f"    command: {command}\n")
    assert not nothing_due()  # the fast path declines to answer...
    proc = cli("tick", check=0)  # ...and the full path fires the new loop
    assert proc.stdout.startswith("fired handmade ("), proc.stdout
    (record,) = wait_for(lambda: cli.records("handmade"))
    assert record["outcome"] == "ok"
    assert cli.records("later") == []


def test_the_idle_tick_imports_no_more_than_it_needs(cli: CLI) -> None:
    """The fast path (bench/tick_idle.py) stays near bare start-up: none of
    the modules a full pass or a zone needs is loaded when nothing is due."""
    settled_home(cli)
    modules = imported_modules("tick")
    assert "loopctl.clock" in modules  # the fast path read the clock
    assert "loopctl.engine.firing" not in modules  # and took no full pass
    costly = {"typing", "datetime", "zoneinfo", "yaml", "typer", "croniter", "loopctl.domain.model",
              "re", "json"}
    assert costly.isdisjoint(modules), costly.intersection(modules)


def test_the_installed_command_imports_no_regex_engine_when_idle(cli: CLI) -> None:
    """The `loopctl` that pip installs (the wheel's own script, not pip's
    generated one, which imports `re`: a third of an idle tick) reaches the
    fast path with neither `re` nor `json` loaded."""
    settled_home(cli)
    script = Path(sys.executable).parent / "loopctl"
    assert script.read_text().startswith("#!"), script
    proc = subprocess.run([str(script), "tick"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    modules = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
               if line.startswith("import time:") and "|" in line}
    assert "loopctl.fast.flatjson" in modules  # it read the summary
    assert not {"re", "json", "enum"} & modules, {"re", "json", "enum"} & modules
