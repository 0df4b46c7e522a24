"""The table of loop settings (domain/loop_settings.py) and the setting added
through it, `--max-output-lines` / `max_output_lines:`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import CLI
from loopctl.domain import loop_settings
from loopctl.domain.errors import UsageError
from loopctl.domain.loop_raw import to_raw
from loopctl.domain.model import KEYS, LoopDef, parse_loop
from loopctl.fast.data_class import fields


def test_every_row_is_a_loopdef_field_or_plain_with_its_default() -> None:
    names = fields(LoopDef)
    probe = LoopDef(name="x")
    for setting in loop_settings.SETTINGS:
        # A plain row needs no field of its own: LoopDef.more holds it.
        assert setting.name in names or setting.plain, setting.key
        if setting.write != "head" and setting.key not in ("agent",):
            assert getattr(probe, setting.name) == setting.default or \
                setting.default is None, setting.key
    assert set(KEYS) == set(loop_settings.KEYS)


@pytest.mark.parametrize("mode", ["run", "tick"])
def test_max_output_lines_keeps_the_first_lines_and_says_so(cli: CLI, mode: str) -> None:
    cli("start", "--name", "chatty", "--every", "1h", "--max-output-lines", "3",
        "--command", "seq 1 500", check=0)
    cli(*(["run", "chatty"] if mode == "run" else ["tick", "--wait"]), check=0)
    log = cli("logs", "chatty", check=0).stdout.splitlines()
    output = [line for line in log if not line.startswith("# loopctl:")]
    assert output[:3] == ["1", "2", "3"] and len(output) == 3, log
    assert "# loopctl: log truncated at 3 lines" in log
    assert cli.json("history", "chatty", "--json")["runs"][0]["outcome"] == "ok"


def test_max_output_lines_in_loops_yaml_status_and_update(cli: CLI, home: Path) -> None:
    cli("start", "--name", "b", "--every", "1h", "--max-output-lines", "20",
        "--command", "true", check=0)
    assert "max_output_lines: 20" in (home / "loops.yaml").read_text()
    assert "output lines 20" in cli("status", "b", check=0).stdout
    assert "limits" not in json.loads(cli("status", "b", "--json", check=0).stdout)
    bad = cli("update", "b", "--max-output-lines", "0")
    assert bad.returncode == 2 and "--max-output-lines" in bad.stderr
    cli("update", "b", "--max-output-lines", "none", check=0)
    assert "max_output_lines" not in (home / "loops.yaml").read_text()
    loop = parse_loop("b", {"command": ["true"], "every": "1h", "max_output_lines": 7})
    assert loop.max_output_lines == 7 and parse_loop("b", to_raw(loop)) == loop
    with pytest.raises(UsageError, match="'max_output_lines' must be a whole number >= 1"):
        parse_loop("b", {"command": ["true"], "every": "1h", "max_output_lines": 0})


def test_an_unknown_key_offers_the_near_one_and_its_line(cli: CLI, home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "loops.yaml").write_text("version: 1\nloops:\n  a:\n    command: 'true'\n"
                                     "    every: 1h\n    max_run: 3\n")
    proc = cli("validate")
    assert "unknown key 'max_run' (did you mean 'max_runs'?)" in proc.stdout + proc.stderr
    assert "(line 6)" in proc.stdout + proc.stderr


def test_the_man_page_describes_every_key() -> None:
    man = (Path(__file__).resolve().parents[2] / "man" / "loopctl.1").read_text()
    section = man.split(".SH LOOPS.YAML", 1)[1].split(".SH FILES", 1)[0]
    for key in loop_settings.KEYS:
        assert "\\fB" + key + "\\fR" in section, key
