"""doctor says only what holds: a bound no loop sets is not reported, one a
loop sets but this machine cannot enforce is a WARN naming the loop; files
that do not exist are not called readable."""

from __future__ import annotations

import pytest

from conftest import CLI
from loopctl.engine import reaper


def findings(cli: CLI, check: str) -> list[dict[str, str]]:
    import json

    out = json.loads(cli("doctor", "--json").stdout)["findings"]
    return [f for f in out if f["check"] == check]


def test_an_unenforceable_bound_is_a_warning_only_for_the_loops_that_set_it(
        cli: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reaper, "limits_here",
                        lambda: {"memory": "the memory controller is not enabled", "pids": None})
    cli("start", "p", "--name", "plain", "--every", "1h", check=0)
    said = [f for f in findings(cli, "bounds") if "cannot be enforced" in f["message"]]
    assert said == []  # no loop asks for --max-memory
    cli("start", "p", "--name", "big", "--every", "1h", "--max-memory", "1G", check=0)
    [said] = [f for f in findings(cli, "bounds") if "cannot be enforced" in f["message"]]
    assert said["level"] == "warn" and "--max-memory" in said["message"]
    assert "big" in said["message"]


def test_files_that_do_not_exist_are_not_called_readable(cli: CLI) -> None:
    [files] = findings(cli, "files")
    assert "readable" not in files["message"] and "loops.yaml yet" in files["message"]
    cli("start", "p", "--name", "one", "--every", "1h", check=0)
    cli("tick", check=0)
    [files] = findings(cli, "files")
    assert files["message"].endswith("state.json are readable")
