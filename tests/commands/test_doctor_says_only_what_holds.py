"""doctor says only what holds: a bound no loop sets is not reported, one a
loop sets but this machine cannot enforce is a WARN naming the loop; files
that do not exist are not called readable."""

from __future__ import annotations

import pytest

from conftest import CLI
from loopctl.engine.containment import cgroup


def findings(cli: CLI, check: str) -> list[dict[str, str]]:
    import json

    out = json.loads(cli("doctor", "--json").stdout)["findings"]
    return [f for f in out if f["check"] == check]


def test_an_unenforceable_bound_is_a_warning_only_for_the_loops_that_set_it(
        cli: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cgroup, "limits_here",
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


def test_a_missing_agent_fails_only_loops_that_run_on_their_own(cli: CLI) -> None:
    """An on-demand or paused loop's agent is missing too, but nothing will
    start it until someone does: a WARN that says when, not a FAIL."""
    for name, extra in (("sched", ["--every", "1h"]), ("ondemand", ["--on-demand"]),
                        ("held", ["--every", "1h"])):
        cli("start", "p", "--name", name, *extra, "--command", "no-such-agent-xyz", check=None)
    cli("pause", "held", check=0)
    said = {f["message"].split("'")[1]: f for f in findings(cli, "agents")}
    assert said["sched"]["level"] == "error"
    assert said["ondemand"]["level"] == "warn" and "triggered or run" in said["ondemand"]["message"]
    assert said["held"]["level"] == "warn" and "resumed" in said["held"]["message"]


def test_a_driver_path_missing_an_agent_is_said_once_for_all_its_loops(cli: CLI) -> None:
    from loopctl.commands.doctor_drivers import _check_paths
    from loopctl.storage.store import Store

    for i in range(3):
        cli("start", "p", "--name", f"l{i}", "--every", "1h", "--command", "no-such-xyz",
            check=None)
    loops = list(Store().read_defs().loops.values())
    said: list[tuple[str, str, str]] = []
    path = "/opt/a:/opt/b:" + "/very/long/dir" * 12
    _check_paths(loops, path, "the daemon's (pid 1)", "fix it", lambda *f: said.append(f))
    [(level, check, message)] = said
    assert level == "warn" and message.count(path) == 1
    assert "3 loops ('l0', 'l1', 'l2') need 'no-such-xyz'" in message


def test_a_loop_paused_at_its_failure_limit_is_listed_with_its_error_and_fix(cli: CLI) -> None:
    from conftest import agent_command

    cli("start", "p", "--name", "broke", "--every", "1h", "--max-failures", "1", "--command",
        agent_command("--print", "could not connect to database", "--exit", "3"), check=0)
    cli("run", "broke", check=1)
    assert cli.json("status", "broke")["reason"] == "failure_limit"
    [said] = findings(cli, "paused")
    assert said["level"] == "warn" and "'broke' is paused (failure_limit)" in said["message"]
    assert "loopctl resume broke" in said["message"]
    assert "could not connect to database" in said["message"]


@pytest.mark.parametrize("max_runs, level", [("1", "ok"), ("2", "warn")])
def test_a_one_off_that_ran_is_finished_not_a_warning(cli: CLI, max_runs: str,
                                                       level: str) -> None:
    """The README's `hello` (issue 51, item 3): `--max-runs 1` that ran."""
    from conftest import agent_command

    cli("start", "p", "--name", "hello", "--every", "1s", "--max-runs", max_runs, "--command",
        agent_command(), check=0)
    for _ in range(int(max_runs)):
        cli("run", "hello", check=0)
    assert cli.json("status", "hello")["reason"] == "iteration_limit"
    [said] = findings(cli, "paused")
    assert said["level"] == level, said
    proc = cli("doctor")
    assert ("WARN paused" in proc.stdout) is (level == "warn"), proc.stdout
    assert proc.returncode == 0
