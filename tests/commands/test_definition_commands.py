"""A newcomer's first hour with definitions and the commands around them: a
bare number in loops.yaml is refused as `--every 10` is, `--command` needs
no prompt, `trigger` says whether anything will fire, and `update --prompt`
changes the objective only when asked to with `--new-objective`."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import CLI, agent_command

DURATION_KEYS = [("every", {}), ("after", {}), ("timeout", {}), ("for", {}),
                 ("min_delay", {"every": "auto"}), ("max_delay", {"every": "auto"}),
                 ("keepalive", {"every": "auto"}), ("checks_timeout", {}),
                 ("if_timeout", {"if": ["true"]}), ("check_timeout", {"check": ["true"]})]


@pytest.mark.parametrize("key,extra", DURATION_KEYS, ids=[k for k, _ in DURATION_KEYS])
@pytest.mark.parametrize("value", [10, "10", " 300 "])
def test_a_bare_number_for_any_duration_key_is_refused(key: str, extra: dict[str, object],
                                                       value: object) -> None:
    from loopctl.domain.errors import UsageError
    from loopctl.domain.model import parse_loop

    raw = {"prompt": "p", "every": "1h", **extra, key: value}
    number = str(value).strip()
    with pytest.raises(UsageError, match=f"bad '{key}' .*a bare number has no unit; give "
                                         f"one, like {number}s or {number}m"):
        parse_loop("x", raw)
    parse_loop("x", {**raw, key: "30m"})  # with a unit it is fine


def test_a_loop_with_a_bare_number_is_invalid_and_the_others_keep_firing(
        cli: CLI, home: Path) -> None:
    home.mkdir()
    (home / "loops.yaml").write_text(
        "version: 1\nloops:\n"
        "  tens:\n    prompt: p\n    every: 10\n"
        f"  slow:\n    prompt: p\n    every: 1h\n    timeout: 300\n"
        f"  good:\n    prompt: p\n    every: 1h\n    command: {agent_command()!r}\n")
    listed = {loop["name"]: loop for loop in cli.json("ls")["loops"]}
    assert listed["tens"]["status"] == listed["slow"]["status"] == "invalid"
    status = cli("status", "tens")
    assert "bad 'every' 10: a bare number has no unit; give one, like 10s or 10m" \
        in status.stdout
    assert "bad 'timeout' 300" in cli("status", "slow").stdout
    assert cli("validate").returncode == 2
    cli("tick", "--wait", check=0)
    assert [r["outcome"] for r in cli.records("good")] == ["ok"]
    assert not cli.records("tens") and not cli.records("slow")


def test_a_command_loop_needs_no_prompt_and_its_stdin_is_empty(cli: CLI,
                                                               tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    proc = cli("start", "--every", "1h", "--command", agent_command("--record", str(calls)))
    assert proc.returncode == 0, proc.stderr
    [name] = [loop["name"] for loop in cli.json("ls")["loops"]]
    assert name.startswith("python")  # named after its program
    assert "prompt" not in cli.json("show", name)["definition"]
    cli("tick", "--wait", check=0)
    [record] = cli.records(name)
    assert record["outcome"] == "ok"
    assert '"stdin": ""' in calls.read_text()
    # A prompt is still needed by presets, and by a command that names one.
    proc = cli("start", "--every", "1h", "--name", "preset")
    assert proc.returncode == 2 and "only a --command loop may go without" in proc.stderr
    proc = cli("start", "--every", "1h", "--name", "echo", "--command", "echo {prompt}")
    assert proc.returncode == 2 and "uses {prompt} but the loop has no prompt" in proc.stderr
    assert cli("validate").returncode == 0  # nothing half-written


def test_update_replaces_the_prompt_only_with_new_objective_and_keeps_history(
        cli: CLI, tmp_path: Path) -> None:
    cli("start", "--name", "u", "--every", "1h", "--command", agent_command(), "--", "old",
        check=0)
    cli("tick", "--wait", check=0)
    refused = cli("update", "u", "--prompt", "new")
    assert refused.returncode == 2
    assert "add --new-objective to confirm" in refused.stderr
    assert cli.json("show", "u")["definition"]["prompt"] == "old"
    proc = cli("update", "u", "--prompt", "new", "--new-objective", check=0)
    assert "updated u: prompt 'new'" in proc.stdout
    assert cli.json("show", "u")["definition"]["prompt"] == "new"
    assert len(cli.records("u")) == 1 and cli.json("status", "u")["runs"]["used"] == 1
    prompt = tmp_path / "PROMPT.md"
    prompt.write_text("from a file\n")
    cli("update", "u", "--prompt-file", str(prompt), "--new-objective", check=0)
    definition = cli.json("show", "u")["definition"]
    assert definition["prompt_file"] == str(prompt) and "prompt" not in definition
    lonely = cli("update", "u", "--new-objective")
    assert lonely.returncode == 2 and "goes with --prompt" in lonely.stderr
