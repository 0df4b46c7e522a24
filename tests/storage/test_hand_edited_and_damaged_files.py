"""Hand-edited and damaged files (DESIGN §11: hand-edited `loops.yaml`, a
damaged `state.json`, run records and the environment are untrusted).

A broken file fails closed (exit 3, one line naming it, the file untouched);
one loop's bad data disables that loop only, `doctor` names it, and every
other loop keeps firing; nothing ever prints a traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hostile.support import (
    install,
    make_template,
    no_traceback,
    one_line_error,
    strict_json,
    strict_state,
)

from conftest import CLI, agent_command, wait_for

MIB = 2**20
GOOD = {"prompt": "p", "command": "true", "every": "1h"}


def write_defs(home: Path, loops: dict[Any, Any] | str) -> Path:
    """A hand-written loops.yaml (a dict is dumped; text is written as is)."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / "loops.yaml"
    if isinstance(loops, str):
        path.write_text(loops)
    else:
        path.write_text(yaml.safe_dump({"version": 1, "loops": loops}, sort_keys=False))
    return path


# -- 1. YAML alias bombs and huge files ------------------------------------------


def alias_bomb(levels: int = 10, width: int = 9) -> str:
    """Anchors nested `levels` deep, `width` aliases each: width**levels
    strings once expanded. Indented to sit under an entry's `env:`."""
    items = ", ".join(['"x"'] * width)
    lines = [f"      L0: &l0 [{items}]"]
    for level in range(1, levels):
        refs = ", ".join([f"*l{level - 1}"] * width)
        lines.append(f"      L{level}: &l{level} [{refs}]")
    return "\n".join(lines) + "\n"


BOMB_FILE = (
    "version: 1\n"
    "loops:\n"
    "  good:\n"
    "    prompt: p\n"
    "    command: 'true'\n"
    "    every: 1h\n"
    "  bomb:\n"
    "    prompt: p\n"
    "    command: 'true'\n"
    "    every: 1h\n"
    "    env:\n" + alias_bomb()
)


@pytest.mark.parametrize("command", [["validate"], ["ls"], ["tick"], ["validate", "FILE"]])
def test_a_yaml_alias_bomb_is_refused_quickly(cli: CLI, home: Path, tmp_path: Path,
                                              command: list[str]) -> None:
    if command == ["validate", "FILE"]:
        outside = tmp_path / "elsewhere.yaml"
        outside.write_text(BOMB_FILE)
        command = ["validate", str(outside)]
    else:
        write_defs(home, BOMB_FILE)
    written = (home / "loops.yaml").read_bytes() if (home / "loops.yaml").exists() else None
    proc = cli(*command, timeout=20)  # a hang guard: expanding the bomb never ends
    assert proc.returncode == 3, (proc.returncode, proc.stdout, proc.stderr)
    assert "alias" in one_line_error(proc).lower()
    if written is not None:
        assert (home / "loops.yaml").read_bytes() == written
    assert cli.records("good") == []


@pytest.mark.parametrize("value", ["0x" + "f" * 4000, "-0" + "7" * 5000, "0b" + "1" * 15000,
                                   "1" * 5000])
@pytest.mark.parametrize("command", [["validate"], ["ls"], ["tick"]])
def test_an_integer_no_setting_takes_is_refused_in_one_line(cli: CLI, home: Path, value: str,
                                                             command: list[str]) -> None:
    """YAML reads `0x` and 4,000 digits as an int that no error message can
    print (str() of it raises past 4,300 digits): every command stopped with
    "unexpected error: ValueError". Refused as a value YAML cannot hold."""
    write_defs(home, "version: 1\nloops:\n  good:\n    prompt: p\n    command: 'true'\n"
                     f"    every: 1h\n    max_runs: {value}\n")
    written = (home / "loops.yaml").read_bytes()
    proc = cli(*command)
    assert proc.returncode == 3, (proc.returncode, proc.stdout, proc.stderr)
    said = one_line_error(proc)
    assert "line 7" in said and "bad value" in said, said
    assert "unexpected" not in said and "Traceback" not in proc.stderr
    assert (home / "loops.yaml").read_bytes() == written


def defs_of_size(size: int) -> str:
    """A valid loops.yaml (one loop, `good`) padded with comments to exactly `size` bytes."""
    head = "version: 1\nloops:\n  good:\n    prompt: p\n    command: 'true'\n    every: 1h\n"
    line = "# " + "padding " * 12 + "\n"
    body = line * ((size - len(head)) // len(line))
    rest = size - len(head) - len(body)
    text = head + body + ("#" + "x" * (rest - 2) + "\n" if rest >= 2 else "\n" * rest)
    assert len(text.encode()) == size
    return text


# 8 MiB is the product's limit (loopctl.storage.store.MAX_DEFS_BYTES), written
# out here so that moving it fails this test: exactly 8 MiB is read, one byte
# more is refused by every reader.
@pytest.mark.parametrize("where", ["home", "file"])
@pytest.mark.parametrize("size", [8 * MIB, 8 * MIB + 1], ids=["8MiB", "8MiB+1"])
def test_a_loops_file_over_8_mib_is_refused_and_8_mib_is_read(
        cli: CLI, home: Path, tmp_path: Path, where: str, size: int) -> None:
    text = defs_of_size(size)
    if where == "home":
        write_defs(home, text)
        commands = [["validate"], ["ls"], ["tick", "--wait"]]
    else:
        big = tmp_path / "big.yaml"
        big.write_text(text)
        commands = [["validate", str(big)]]
    for command in commands:
        proc = cli(*command, timeout=30)
        if size == 8 * MIB:
            assert proc.returncode == 0, (command, proc.returncode, proc.stdout, proc.stderr)
        else:
            assert proc.returncode == 3, (command, proc.returncode, proc.stdout, proc.stderr)
            assert "larger than 8 MiB; expected a loops.yaml" in one_line_error(proc)
    if where == "home":
        assert len(cli.records("good")) == (size == 8 * MIB)  # read, it ran once
        assert (home / "loops.yaml").read_text() == text  # nothing rewrote it


# -- 2. a damaged state.json -------------------------------------------------------


@pytest.fixture(scope="module")
def two_loops(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with loops `damaged` and `good` (`true`, every 1h, due now)."""
    return make_template(
        tmp_path_factory,
        ["start", "p", "--name", "damaged", "--every", "1h", "--command", "true"],
        ["start", "p", "--name", "good", "--every", "1h", "--command", "true"])


NAN, INF = float("nan"), float("inf")
# (id, what to do to the `damaged` entry): a dict updates it, anything else
# replaces it whole.
ENTRY_DAMAGES = [
    ("status-only", ("replace", {"status": "active"})),
    ("next-due-nan", ("update", {"next_due": NAN})),
    ("next-due-text", ("update", {"next_due": "soon"})),
    ("deadline-1e308", ("update", {"deadline": 1e308})),
    ("created-minus-1e308", ("update", {"created": -1e308})),
    ("iterations-text", ("update", {"iterations": "3"})),
    ("iterations-negative", ("update", {"iterations": -1})),
    ("run-number", ("update", {"run": 5})),
    ("run-id-traversal", ("update", {"run": {"run_id": "../../x"}})),
    ("outcomes-text", ("update", {"outcomes": "x"})),
    ("session-flag", ("update", {"session_id": "--yolo"})),
    ("cost-nan", ("update", {"cost_usd": NAN})),
    ("status-bogus", ("update", {"status": "bogus"})),
    ("entry-list", ("replace", ["active", 1, None])),
]


def damage_entry(home: Path, how: str, value: Any, name: str = "damaged") -> None:
    path = home / "state" / "state.json"
    state = json.loads(path.read_text())
    if how == "replace":
        state["loops"][name] = value
    else:
        state["loops"][name].update(value)
    path.write_text(json.dumps(state))  # allow_nan: NaN goes in as the literal text


def test_a_damaged_state_entry_disables_only_that_loop(cli: CLI) -> None:
    """Every damage of ENTRY_DAMAGES, each to a loop of its own, in one home
    with `good`; one tick (a tick per damage cost ~0.2 s of CPU each)."""
    names = {f"damaged-{i}": damage for i, damage in ENTRY_DAMAGES}
    for name in [*names, "good"]:
        cli("start", "p", "--name", name, "--every", "1h", "--command", "true", check=0)
    for name, (how, value) in names.items():
        damage_entry(cli.home, how, value, name)

    tick = cli("tick", "--wait")
    no_traceback(tick)
    assert tick.returncode in (0, 1), (tick.returncode, tick.stdout, tick.stderr)
    assert len(cli.records("good")) == 1, tick.stderr

    ls = cli("ls", "--json")
    no_traceback(ls)
    assert ls.returncode == 0, (ls.stdout, ls.stderr)
    listed = {loop["name"]: loop for loop in strict_json(ls.stdout)["loops"]}
    for name in names:
        bad = listed[name]
        assert bad["status"] == "invalid" or (bad["status"], bad.get("reason")) == (
            "paused", "error"), bad
    assert listed["good"]["status"] in ("active", "running"), listed["good"]

    status = cli("status", "good", "--json")
    no_traceback(status)
    assert status.returncode == 0, (status.stdout, status.stderr)
    assert strict_json(status.stdout)["name"] == "good"

    doctor = cli("doctor", "--json")
    no_traceback(doctor)
    assert doctor.returncode == 1, (doctor.stdout, doctor.stderr)
    report = strict_json(doctor.stdout)
    for name in names:
        assert any(name in f["message"] and f["level"] == "error"
                   for f in report["findings"]), (name, report)

    strict_state(cli.home)


TOP_DAMAGES = [
    pytest.param(b"[]", id="list"),
    pytest.param(b'{"version":1,"loops":[]}', id="loops-list"),
    pytest.param(b'{"version":3,"loops":{}}', id="version-3"),
    pytest.param(b'{"version":1}', id="no-loops"),
    pytest.param(b"this is not JSON at all\n", id="not-json"),
    pytest.param(b'{"version":1,"loops":{"\xff\xfe":{}}}', id="invalid-utf8"),
]


@pytest.mark.parametrize("command", [["tick"], ["run", "good"], ["ls"], ["status", "good"]],
                         ids=lambda c: "-".join(c))
@pytest.mark.parametrize("damage", TOP_DAMAGES)
def test_a_damaged_state_file_fails_closed(cli: CLI, home: Path, two_loops: Path,
                                           damage: bytes, command: list[str]) -> None:
    install(two_loops, home)
    state_file = home / "state" / "state.json"
    state_file.write_bytes(damage)
    proc = cli(*command)
    assert proc.returncode == 3, (proc.returncode, proc.stdout, proc.stderr)
    assert str(state_file) in one_line_error(proc)
    assert state_file.read_bytes() == damage
    assert cli.records("good") == []


# -- 3. damaged run records -------------------------------------------------------


def nan_fields(record: Path) -> None:
    data = json.loads(record.read_text())
    data.update(duration_s=NAN, exit_code=NAN, cost_usd=INF, iteration=-INF)
    record.write_text(json.dumps(data))


RECORD_DAMAGES = {
    "nan-fields": nan_fields,
    "list": lambda p: p.write_text("[1, 2, 3]\n"),
    "10mib-junk": lambda p: p.write_bytes(b"{\x00junk" * (10 * MIB // 6 + 1)),
    "invalid-utf8": lambda p: p.write_bytes(b'{"run_id": "\xff\xfe", "outcome": "ok"}'),
    "symlink-passwd": lambda p: (p.unlink(), p.symlink_to("/etc/passwd")),
}


@pytest.mark.parametrize("damage", list(RECORD_DAMAGES))
def test_a_damaged_run_record_is_survived(cli: CLI, damage: str) -> None:
    cli("start", "p", "--name", "rec", "--every", "1h", "--command", "true", check=0)
    cli("run", "rec", check=0)
    (record,) = [p for p in (cli.state_dir / "runs" / "rec").glob("*.json")
                 if not p.name.endswith(".decision.json")]
    RECORD_DAMAGES[damage](record)
    for command in (["history", "rec"], ["history", "rec", "--json"], ["logs", "rec"], ["ls"]):
        proc = cli(*command)
        no_traceback(proc)
        assert proc.returncode == 0, (command, proc.returncode, proc.stdout, proc.stderr)
        assert "root:" not in proc.stdout
        if "--json" in command:
            strict_json(proc.stdout)


# -- 4. hooks -------------------------------------------------------------------------


def capturing_hook(path: Path, out: Path) -> Path:
    """A hook that copies its stdin to `out` (atomically: waiters see it whole)."""
    path.write_text(
        f"#!{sys.executable}\n"
        "import os, sys\n"
        "data = sys.stdin.buffer.read()\n"
        f"with open({str(out) + '.tmp'!r}, 'wb') as handle:\n"
        "    handle.write(data)\n"
        f"os.replace({str(out) + '.tmp'!r}, {str(out)!r})\n")
    path.chmod(0o700)
    return path


@pytest.mark.parametrize("decision", ["complete", "fail"])
def test_a_hook_gets_an_event_over_128_kib_intact(cli: CLI, home: Path, tmp_path: Path,
                                                  decision: str) -> None:
    out = tmp_path / "event.json"
    hook = capturing_hook(tmp_path / "hook", out)
    cli("start", "short for now", "--name", "hooked", "--every", "1h", "--on-attention",
        str(hook), "--command", agent_command("--decide", decision), check=0)
    # One argument cannot carry 200 KiB (Linux: 128 KiB per argument), so the
    # long prompt is written into loops.yaml by hand.
    prompt = "".join(f"line {i}: keep the build green and the tests fast.\n"
                     for i in range(4000))
    assert len(prompt) > 200 * 1024
    defs_file = home / "loops.yaml"
    doc = yaml.safe_load(defs_file.read_text())
    doc["loops"]["hooked"]["prompt"] = prompt
    defs_file.write_text(yaml.safe_dump(doc, sort_keys=False))

    proc = cli("run", "hooked")
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    wait_for(out.exists)
    raw = out.read_bytes()
    assert len(raw) > 128 * 1024
    event = json.loads(raw)
    assert event["loop"] == "hooked"
    assert event["objective"] == prompt
    assert event["status"] == {"complete": "completed", "fail": "failed"}[decision]


def test_a_hook_that_is_not_executable_is_recorded(cli: CLI, tmp_path: Path) -> None:
    hook = capturing_hook(tmp_path / "hook", tmp_path / "event.json")
    cli("start", "p", "--name", "hooked", "--every", "1h", "--on-attention", str(hook),
        "--command", agent_command("--decide", "block"), check=0)
    hook.chmod(0o600)
    cli("run", "hooked", check=0)
    error = wait_for(lambda: cli.json("status", "hooked").get("hook_error"))
    assert str(hook) in error["message"]
    assert not (tmp_path / "event.json").exists()


def test_update_on_attention_none_clears_the_hook_and_empty_is_refused(
        cli: CLI, tmp_path: Path) -> None:
    hook = capturing_hook(tmp_path / "hook", tmp_path / "event.json")
    cli("start", "p", "--name", "hooked", "--every", "1h", "--on-attention", str(hook),
        "--command", "true", check=0)
    assert cli.json("show", "hooked")["definition"]["on_attention"] == str(hook)

    empty = cli("update", "hooked", "--on-attention", "")
    assert empty.returncode == 2, (empty.stdout, empty.stderr)
    one_line_error(empty)
    assert cli.json("show", "hooked")["definition"]["on_attention"] == str(hook)

    cli("update", "hooked", "--on-attention", "none", check=0)
    assert "on_attention" not in cli.json("show", "hooked")["definition"]
    assert "on_attention" not in yaml.safe_load((cli.home / "loops.yaml").read_text())[
        "loops"]["hooked"]


# -- 5. numbers in the environment -----------------------------------------------------

BAD_ENV = [
    ("LOOPCTL_CLOCK_OFFSET", "abc"),
    ("LOOPCTL_LEASE_TTL", "nan"),
    ("LOOPCTL_LEASE_TTL", "-5"),
    ("LOOPCTL_KILL_GRACE", "inf"),
]


@pytest.mark.parametrize("command", ["tick", "ls"])
@pytest.mark.parametrize(("variable", "value"),
                         [pytest.param(k, v, id=f"{k}={v}") for k, v in BAD_ENV])
def test_a_bad_number_in_the_environment_is_a_usage_error(
        cli: CLI, command: str, variable: str, value: str) -> None:
    cli("start", "p", "--name", "due", "--every", "1h", "--command", "true", check=0)
    proc = cli(command, env={variable: value})
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert variable in one_line_error(proc)


# -- 6. a created_at in year 9999 --------------------------------------------------------


def test_a_created_at_in_year_9999_is_an_invalid_entry(cli: CLI, home: Path) -> None:
    write_defs(home, (
        "version: 1\n"
        "loops:\n"
        "  normal:\n"
        "    prompt: p\n"
        "    command: 'true'\n"
        "    every: 1h\n"
        "  future:\n"
        "    prompt: p\n"
        "    command: 'true'\n"
        "    every: 1h\n"
        "    created_at: 9999-12-31T00:00:00Z\n"))
    validate = cli("validate", "--json")
    no_traceback(validate)
    assert validate.returncode == 2, (validate.stdout, validate.stderr)
    report = strict_json(validate.stdout)
    assert "future" in report["invalid"] and report["valid"] == ["normal"], report

    for args in (["ls"], ["ls", "--json"]):
        proc = cli(*args)
        no_traceback(proc)
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    listed = {loop["name"]: loop for loop in strict_json(cli("ls", "--json").stdout)["loops"]}
    assert listed["normal"]["status"] == "active"
    assert listed["future"]["status"] == "invalid"
    tick = cli("tick", "--wait")
    no_traceback(tick)
    assert len(cli.records("normal")) == 1 and cli.records("future") == []


# -- 7. YAML keys that are not strings ----------------------------------------------------


def yaml_name(key: Any) -> str:
    """A loops.yaml key as a user reads it: `true`, `null`, `123`."""
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)


def names_in_file(home: Path) -> set[str]:
    return {yaml_name(k) for k in yaml.safe_load((home / "loops.yaml").read_text())["loops"]}


def test_loop_names_yaml_reads_as_other_types_are_listed_and_removed_as_written(
        cli: CLI, home: Path) -> None:
    entry = "    prompt: p\n    command: 'true'\n    every: 1h\n"
    write_defs(home, "version: 1\nloops:\n" + "".join(
        f"  {key}:\n{entry}" for key in ("true", "null", "123", "keep")))
    keep = yaml.safe_load((home / "loops.yaml").read_text())["loops"]["keep"]

    ls = cli("ls", "--json")
    no_traceback(ls)
    assert ls.returncode == 0, ls.stderr
    assert {loop["name"] for loop in strict_json(ls.stdout)["loops"]} == {
        "true", "null", "123", "keep"}
    text = cli("ls", check=0).stdout
    assert all(any(line.split()[0] == name for line in text.splitlines() if line.split())
               for name in ("true", "null", "123")), text

    for name, left in (("true", {"null", "123", "keep"}), ("null", {"123", "keep"})):
        proc = cli("rm", name)
        no_traceback(proc)
        assert proc.returncode == 0, (name, proc.stdout, proc.stderr)
        assert names_in_file(home) == left
        assert yaml.safe_load((home / "loops.yaml").read_text())["loops"]["keep"] == keep
        listed = {loop["name"] for loop in strict_json(cli("ls", "--json").stdout)["loops"]}
        assert listed == left
