"""The lifecycle commands through the real CLI (issue 2, DESIGN §4, §8)."""

from __future__ import annotations

import json
import re
import shutil
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml

import loopctl
from conftest import CLI, loopctl_at

# The smoke path runs every command as a real process; the other tests run the
# read-and-edit commands through the same entry point in-process (conftest).

ISO_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")
LOOKS_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")
DURATION_TEXT = re.compile(r"^(\d+[wdhms])+$")
TIME_KEYS = {"deadline", "next_fire"}
# Free text a user typed: may look like anything.
FREE_TEXT_KEYS = {"text", "prompt", "name", "until", "summary", "evidence", "note", "cwd",
                  "file", "error"}


def one_line_error(proc: Any) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {proc.stderr!r}"
    return lines[0]


def parse_z(text: str) -> float:
    assert ISO_Z.match(text), text
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def edit_state(home: Path, name: str, **changes: Any) -> None:
    path = home / "state" / "state.json"
    state = json.loads(path.read_text())
    state["loops"][name].update(changes)
    path.write_text(json.dumps(state))


# -- the smoke path ------------------------------------------------------------


@pytest.mark.real_processes
def test_smoke_path(cli: CLI, home: Path) -> None:
    proc = cli("start", "--every", "10m", "--name", "demo", "say hi", check=0)
    assert "demo" in proc.stdout
    assert "Traceback" not in proc.stderr

    proc = cli("ls", check=0)
    row = next(line for line in proc.stdout.splitlines() if line.startswith("demo"))
    assert "every 10m" in row and "active" in row and "0/50" in row

    info = cli.json("status", "demo")
    assert info["version"] == 1
    assert info["name"] == "demo" and info["status"] == "active"
    assert info["schedule"]["every_s"] == 600
    assert info["runs"] == {"used": 0, "limit": 50}

    proc = cli("pause", "demo", check=0)
    assert "paused" in proc.stdout
    info = cli.json("status", "demo")
    assert (info["status"], info["reason"]) == ("paused", "user")
    assert info["next_fire"] is None

    proc = cli("resume", "demo", check=0)
    assert "resumed" in proc.stdout
    info = cli.json("status", "demo")
    assert (info["status"], info["reason"]) == ("active", None)
    assert info["next_fire"] is not None

    proc = cli("rm", "demo", check=0)
    assert "demo" in proc.stdout
    assert cli.json("ls")["loops"] == []
    assert "demo" not in (yaml.safe_load((home / "loops.yaml").read_text())["loops"] or {})
    assert "demo" not in cli.state()["loops"]
    assert cli("status", "demo").returncode == 4


def test_list_is_an_alias_of_ls(cli: CLI) -> None:
    cli("start", "--every", "10m", "--name", "demo", "say hi", check=0)

    def stable(data: dict[str, Any]) -> dict[str, Any]:
        for loop in data["loops"]:
            loop.pop("deadline_remaining_s")  # may tick over between the calls
        return data

    assert stable(cli.json("list")) == stable(cli.json("ls"))


def test_ls_on_a_fresh_home_prints_a_hint(cli: CLI, home: Path) -> None:
    proc = cli("ls", check=0)
    assert proc.stderr == ""
    assert "loopctl start" in proc.stdout, proc.stdout
    assert cli.json("ls") == {"version": 1, "loops": []}
    # Reading commands do not write.
    assert not (home / "loops.yaml").exists()
    assert not (home / "state" / "state.json").exists()


def test_status_without_name_lists_all(cli: CLI) -> None:
    cli("start", "--every", "10m", "--name", "one", "p", check=0)
    cli("start", "--every", "1h", "--name", "two", "p", check=0)
    data = cli.json("status")
    assert data["version"] == 1
    assert [loop["name"] for loop in data["loops"]] == ["one", "two"]


def test_ls_fits_80_columns(cli: CLI) -> None:
    long_name = "a" * 64
    cli("start", "--cron", "*/10 * * * *", "--tz", "America/Argentina/Buenos_Aires",
        "--name", long_name, "p", check=0)
    cli("start", "--every", "auto", "--name", "short", "p", check=0)
    proc = cli("ls", check=0)
    # Free text gives way; a name never does (two loops must not print alike),
    # so a 64-character name makes the table wider than 80, and only by it.
    assert f"{long_name}  " in proc.stdout
    too_wide = [line for line in proc.stdout.splitlines() if len(line) > 80 + len(long_name)]
    assert not too_wide, "\n".join(too_wide)
    cli("rm", long_name, check=0)
    proc = cli("ls", check=0)
    too_wide = [line for line in proc.stdout.splitlines() if len(line) > 80]
    assert not too_wide, "\n".join(too_wide)
    proc = cli("status", "short", check=0)
    too_wide = [line for line in proc.stdout.splitlines() if len(line) > 80]
    assert not too_wide, "\n".join(too_wide)


def test_start_without_name_makes_a_unique_slug(cli: CLI) -> None:
    first = cli.json("start", "--every", "10m", "Check the Build, fix anything red!")
    second = cli.json("start", "--every", "10m", "Check the Build, fix anything red!")
    assert re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,63}", first["name"])
    assert first["name"] != second["name"]
    assert {first["name"], second["name"]} <= {loop["name"] for loop in cli.json("ls")["loops"]}


def test_start_stores_cwd_absolute_and_env(cli: CLI, home: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    cli("start", "--every", "10m", "--name", "e", "--cwd", str(work), "--env", "A=1",
        "--env", "B_2=x=y", "p", check=0)
    entry = yaml.safe_load((home / "loops.yaml").read_text())["loops"]["e"]
    assert entry["cwd"] == str(work)
    assert entry["env"] == {"A": "1", "B_2": "x=y"}


def test_start_refuses_a_duplicate_name(cli: CLI, home: Path) -> None:
    cli("start", "--every", "10m", "--name", "demo", "one", check=0)
    before = (home / "loops.yaml").read_bytes()
    proc = cli("start", "--every", "10m", "--name", "demo", "two")
    assert proc.returncode == 2
    assert "demo" in one_line_error(proc)
    assert (home / "loops.yaml").read_bytes() == before


# -- --json shapes ---------------------------------------------------------------


def check_json_shape(data: Any) -> None:
    """A `version` field; times ISO-8601 UTC ending in Z; durations in seconds."""
    assert isinstance(data, dict), data
    assert data.get("version") == 1, data
    problems: list[str] = []

    def walk(value: Any, key: str, where: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, str(k), f"{where}.{k}")
            return
        if isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, key, f"{where}[{i}]")
            return
        is_time_key = key.endswith("_at") or key in TIME_KEYS
        if is_time_key and value is not None and not (
                isinstance(value, str) and ISO_Z.match(value)):
            problems.append(f"{where}: time {value!r} is not ISO-8601 UTC with Z")
        if key.endswith("_s") and value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float))):
            problems.append(f"{where}: duration {value!r} is not a number of seconds")
        if isinstance(value, str) and key not in FREE_TEXT_KEYS:
            if LOOKS_ISO.match(value) and not ISO_Z.match(value):
                problems.append(f"{where}: time {value!r} is not ISO-8601 UTC with Z")
            if DURATION_TEXT.match(value):
                problems.append(f"{where}: duration {value!r} is text, not seconds")

    walk(data, "", "$")
    assert not problems, "\n".join(problems)


@pytest.fixture(scope="module")
def three_loops_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with three loops made once (per worker) by the CLI's entry
    point; copied per test."""
    template = tmp_path_factory.mktemp("template") / "home"
    for argv in (
        ["start", "--every", "1h30m", "--name", "every", "--for", "2d", "--timeout", "20m",
         "p"],
        ["start", "--cron", "30 2 * * *", "--tz", "Europe/Berlin", "--name", "cron", "p"],
        ["start", "--every", "auto", "--min-delay", "2m", "--max-delay", "2h",
         "--name", "auto", "p"],
    ):
        proc = loopctl_at(template, *argv)
        assert proc.returncode == 0, proc.stderr
    return template


@pytest.fixture
def three_loops(three_loops_template: Path, home: Path) -> None:
    shutil.copytree(three_loops_template, home)


@pytest.mark.parametrize("argv", [
    pytest.param(["ls"], id="ls"),
    pytest.param(["status"], id="status-all"),
    pytest.param(["status", "every"], id="status-every"),
    pytest.param(["status", "cron"], id="status-cron"),
    pytest.param(["status", "auto"], id="status-auto"),
    pytest.param(["update", "every", "--max-runs", "9"], id="update"),
    pytest.param(["start", "--every", "45s", "--after", "1m", "--name", "new", "p"],
                 id="start"),
    pytest.param(["validate"], id="validate"),
    pytest.param(["pause", "every"], id="pause"),
])
def test_json_shape(cli: CLI, three_loops: None, argv: list[str]) -> None:
    check_json_shape(cli.json(*argv))


@pytest.mark.parametrize("name", ["every", "cron", "auto"])
def test_show_json_shape(cli: CLI, three_loops: None, name: str) -> None:
    data = cli.json("show", name)
    assert data["name"] == name
    check_json_shape(data)


def test_show_json_of_a_hand_written_loop(cli: CLI, home: Path) -> None:
    """YAML reads an unquoted timestamp as a datetime; --json still says ISO Z."""
    home.mkdir(mode=0o700)
    (home / "loops.yaml").write_text("version: 1\nloops:\n  mine:\n    prompt: p\n"
                                     "    every: 1h\n    created_at: 2026-11-30T03:00:00Z\n")
    assert cli.json("status", "mine")["created_at"] == "2026-11-30T03:00:00Z"
    data = cli.json("show", "mine")
    assert data["definition"]["created_at"] == "2026-11-30T03:00:00Z", data
    check_json_shape(data)


def test_json_values(cli: CLI, three_loops: None) -> None:
    info = cli.json("status", "every")
    assert info["schedule"]["every_s"] == 5400
    assert parse_z(info["deadline"]) - parse_z(info["created_at"]) == 2 * 86400
    assert 0 < info["deadline_remaining_s"] <= 2 * 86400
    cron = cli.json("status", "cron")
    assert cron["schedule"]["cron"] == "30 2 * * *"
    assert cron["schedule"]["tz"] == "Europe/Berlin"
    assert cron["schedule"]["every_s"] is None
    # 02:30 Berlin is 00:30 or 01:30 UTC.
    assert cron["next_fire"][11:16] in ("00:30", "01:30"), cron["next_fire"]
    started = cli.json("start", "--every", "45s", "--after", "1m", "--name", "new", "p")
    assert started["version"] == 1 and started["name"] == "new"
    assert parse_z(started["next_fire"]) - parse_z(started["created_at"]) == 60
    valid = cli.json("validate")
    assert valid["valid"] == ["auto", "cron", "every", "new"]
    assert valid["invalid"] == {}


def test_show_prints_the_definition_as_yaml(cli: CLI, home: Path) -> None:
    cli("start", "--every", "10m", "--name", "demo", "--max-runs", "7", "say hi", check=0)
    proc = cli("show", "demo", check=0)
    shown = yaml.safe_load(proc.stdout)
    stored = yaml.safe_load((home / "loops.yaml").read_text())["loops"]["demo"]
    assert shown == {"demo": stored}
    assert stored["prompt"] == "say hi" and stored["max_runs"] == 7


# -- update ------------------------------------------------------------------------


def test_update_limits_are_absolute(cli: CLI, home: Path) -> None:
    cli("start", "--every", "10m", "--name", "demo", "--max-runs", "50", "p", check=0)
    edit_state(home, "demo", iterations=20)
    result = cli.json("update", "demo", "--max-runs", "100")
    assert result["runs"] == {"used": 20, "limit": 100}
    result = cli.json("update", "demo", "--max-runs", "30")
    assert result["runs"] == {"used": 20, "limit": 30}
    assert yaml.safe_load((home / "loops.yaml").read_text())["loops"]["demo"]["max_runs"] == 30


def test_update_for_counts_from_the_original_start(cli: CLI) -> None:
    started = cli.json("start", "--every", "10m", "--name", "demo", "--for", "1d", "p")
    updated = cli.json("update", "demo", "--for", "3d")
    assert updated["created_at"] == started["created_at"]
    assert parse_z(updated["deadline"]) - parse_z(started["created_at"]) == 3 * 86400


def test_update_keeps_the_prompt_and_other_keys(cli: CLI, home: Path) -> None:
    cli("start", "--every", "10m", "--name", "demo", "--env", "A=1", "--until", "DONE",
        "the objective", check=0)
    before = yaml.safe_load((home / "loops.yaml").read_text())["loops"]["demo"]
    cli("update", "demo", "--timeout", "5m", "--every", "1h", check=0)
    after = yaml.safe_load((home / "loops.yaml").read_text())["loops"]["demo"]
    assert after.pop("timeout") == "5m" and after.pop("every") == "1h"
    before.pop("timeout")
    before.pop("every")
    assert after == before


@pytest.mark.parametrize("argv", [
    pytest.param(["--prompt", "something else"], id="prompt-option"),
    pytest.param(["--prompt-file", "PROMPT.md"], id="prompt-file-option"),
    pytest.param(["new objective"], id="prompt-argument"),
    pytest.param(["new objective", "--max-runs", "9"], id="prompt-argument-and-limit"),
    pytest.param([], id="nothing"),
])
def test_update_refuses_to_change_the_objective(cli: CLI, home: Path, argv: list[str]) -> None:
    cli("start", "--every", "10m", "--name", "demo", "the objective", check=0)
    loops_before = (home / "loops.yaml").read_bytes()
    state_before = (home / "state" / "state.json").read_bytes()
    proc = cli("update", "demo", *argv)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    one_line_error(proc)
    assert (home / "loops.yaml").read_bytes() == loops_before
    assert (home / "state" / "state.json").read_bytes() == state_before


def test_raising_max_runs_after_iteration_limit_lets_resume_work(cli: CLI, home: Path) -> None:
    cli("start", "--every", "10m", "--name", "demo", "--max-runs", "3", "p", check=0)
    edit_state(home, "demo", iterations=3, status="paused", reason="iteration_limit",
               next_due=None)
    info = cli.json("status", "demo")
    assert (info["status"], info["reason"]) == ("paused", "iteration_limit")

    proc = cli("resume", "demo")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "iteration_limit" in one_line_error(proc)
    assert "`loopctl update demo --max-runs ...`" in proc.stderr  # the loop, not NAME
    assert cli.json("status", "demo")["status"] == "paused"

    result = cli.json("update", "demo", "--max-runs", "5")
    assert result["runs"] == {"used": 3, "limit": 5}
    assert (result["status"], result["reason"]) == ("paused", "iteration_limit")

    cli("resume", "demo", check=0)
    info = cli.json("status", "demo")
    assert (info["status"], info["reason"]) == ("active", None)
    assert info["runs"] == {"used": 3, "limit": 5}
    assert info["next_fire"] is not None


def test_resume_after_the_deadline_is_refused(cli: CLI, home: Path) -> None:
    cli("start", "--every", "10m", "--name", "demo", "--for", "1h", "p", check=0)
    state = cli.state()["loops"]["demo"]
    edit_state(home, "demo", created=state["created"] - 7200,
               deadline=state["deadline"] - 7200, status="paused", reason="user")
    proc = cli("resume", "demo")
    assert proc.returncode == 2
    assert "duration_limit" in one_line_error(proc)
    assert "`loopctl update demo --for ...`" in proc.stderr


# -- unknown loops -------------------------------------------------------------------

UNKNOWN_LOOP_COMMANDS = [
    ["status", "nope"], ["show", "nope"], ["pause", "nope"], ["resume", "nope"],
    ["stop", "nope"], ["rm", "nope"], ["update", "nope", "--max-runs", "5"],
    ["run", "nope"], ["logs", "nope"], ["history", "nope"],
]


@pytest.mark.parametrize("with_loops", [False, True], ids=["fresh", "with-loops"])
@pytest.mark.parametrize("argv", UNKNOWN_LOOP_COMMANDS, ids=lambda a: a[0])
def test_unknown_loop_exits_4(cli: CLI, home: Path, three_loops_template: Path,
                              argv: list[str], with_loops: bool) -> None:
    if with_loops:
        shutil.copytree(three_loops_template, home)
    before = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()
              and not p.name.endswith(".lock")}
    proc = cli(*argv)
    assert proc.returncode == 4, (proc.returncode, proc.stdout, proc.stderr)
    assert "nope" in one_line_error(proc)
    after = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()
             and not p.name.endswith(".lock")}
    assert after == before


# -- broken entries ------------------------------------------------------------------

GOOD_ENTRY = "  good:\n    prompt: hello\n    every: 10m\n    max_runs: 7\n"

# (entry text, its key as YAML parses it, a fragment of the reason)
BROKEN_ENTRIES = [
    pytest.param("  broken:\n    prompt: p\n    every: 10x\n", "broken", "every",
                 id="bad-duration"),
    pytest.param("  broken:\n    prompt: p\n    every: 10m\n    colour: blue\n"
                 "    env: {A: '1'}\n    tags: [a, b]\n", "broken", "colour",
                 id="unknown-key"),
    pytest.param("  broken:\n    prompt: |\n      line one\n      line two\n"
                 "    cron: '0 0 31 2 *'\n    created_at: 2026-11-30T03:00:00Z\n",
                 "broken", "cron", id="impossible-cron"),
    pytest.param("  broken:\n    prompt: p\n    every: 10m\n    max_runs: lots\n", "broken",
                 "max_runs", id="bad-count"),
    pytest.param("  broken: 42\n", "broken", "mapping", id="not-a-mapping"),
    pytest.param("  broken:\n", "broken", "broken", id="null-entry"),
    pytest.param("  UPPER:\n    prompt: p\n    every: 10m\n", "UPPER", "name",
                 id="bad-name"),
    pytest.param("  123:\n    prompt: p\n    every: 10m\n", 123, "name",
                 id="integer-name"),
]


@pytest.mark.parametrize(("entry", "key", "reason"), BROKEN_ENTRIES)
def test_broken_entry_is_shown_invalid_and_preserved(
        cli: CLI, home: Path, entry: str, key: Any, reason: str) -> None:
    home.mkdir(mode=0o700)
    loops_file = home / "loops.yaml"
    loops_file.write_text("version: 1\nloops:\n" + GOOD_ENTRY + entry)
    original = yaml.safe_load(loops_file.read_text())["loops"]

    proc = cli("ls")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    row = next((line for line in proc.stdout.splitlines() if line.startswith(str(key))), None)
    assert row is not None, proc.stdout
    assert "invalid" in row, row  # the reason is checked in full below (rows are cut to 80 columns)
    listed = {loop["name"]: loop for loop in cli.json("ls")["loops"]}
    assert listed[str(key)]["status"] == "invalid"
    assert reason.lower() in listed[str(key)]["error"].lower()
    assert listed["good"]["status"] == "active"

    info = cli.json("status", "good")
    assert info["status"] == "active" and info["runs"]["limit"] == 7

    def entries() -> dict[Any, Any]:
        loops: dict[Any, Any] = yaml.safe_load(loops_file.read_text())["loops"]
        return loops

    cli("start", "--every", "5m", "--name", "third", "p", check=0)
    assert entries()[key] == original[key]
    assert entries()["good"] == original["good"]
    assert "third" in entries()

    assert cli.json("update", "good", "--max-runs", "9")["runs"]["limit"] == 9
    assert entries()[key] == original[key]
    cli("rm", "third", check=0)
    assert entries()[key] == original[key]
    assert list(entries()) == ["good", key]


# -- decide, --version, help -----------------------------------------------------------


def test_decide_outside_a_run(cli: CLI, home: Path) -> None:
    proc = cli("decide", "complete", "--summary", "done")
    assert proc.returncode == 2
    message = one_line_error(proc)
    assert "inside a run" in message or "LOOPCTL_DECISION_FILE" in message, message
    assert not (home / "loops.yaml").exists()


def test_decide_rejects_an_unknown_kind(cli: CLI, tmp_path: Path) -> None:
    target = tmp_path / "decision.json"
    proc = cli("decide", "maybe", env={"LOOPCTL_DECISION_FILE": str(target)})
    assert proc.returncode == 2
    assert "maybe" in one_line_error(proc)
    assert not target.exists()


def test_version(cli: CLI) -> None:
    proc = cli("--version", check=0)
    assert proc.stdout.strip() == f"loopctl {loopctl.__version__}"
    assert metadata.version("loopctl") == loopctl.__version__


def _all_commands() -> list[tuple[str, Any]]:
    import typer

    from loopctl.cli.app import app

    out: list[tuple[str, Any]] = []

    def walk(prefix: str, group: Any) -> None:
        for name, command in sorted(group.commands.items()):
            out.append((f"{prefix}{name}", command))
            if hasattr(command, "commands"):
                walk(f"{prefix}{name} ", command)

    walk("", typer.main.get_command(app))
    return out


def test_every_command_has_help() -> None:
    commands = _all_commands()
    assert len(commands) >= 17
    missing = [name for name, command in commands
               if not (command.help or command.short_help or "").strip()]
    assert not missing, f"commands without help: {missing}"


def test_help_lists_every_command(cli: CLI) -> None:
    proc = cli("--help", check=0)
    listed = set(re.findall(r"^  ([a-z][a-z-]*)\s{2,}\S", proc.stdout.split("Options:")[1],
                            re.M))
    registered = {name for name, command in _all_commands()
                  if " " not in name and not command.hidden}
    assert listed == registered
    for name in ("start", "ls", "list", "status", "show", "update", "pause", "resume",
                 "stop", "rm", "validate"):
        assert name in listed
