"""A hostile agent cannot hurt other loops (DESIGN §11: the agent is untrusted).

Whatever an agent writes to its decision file, reports as its session id or
cost, or floods its output with: `loopctl run` exits 0 or 1 with one record
and no traceback, state.json stays strict JSON with finite numbers, `ls` and
`status` keep working, a bad value is dropped with a note, and every other
loop in the home keeps firing.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hostile.support import (
    FAKE_CLAUDE,
    HOSTILE_BIN,
    install,
    make_template,
    no_traceback,
    non_finite,
    strict_json,
    strict_state,
)

from conftest import CLI, loopctl_argv

MIB = 2**20


@pytest.fixture(scope="module")
def with_good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home holding one well-behaved loop `good` (`true`, due now)."""
    return make_template(tmp_path_factory, ["start", "p", "--name", "good", "--every", "1h",
                                            "--command", "true"])


def strict_cli(cli: CLI, *args: str) -> Any:
    """`loopctl ARGS --json`: exit 0, no traceback, strict JSON on stdout."""
    proc = cli(*args, "--json")
    no_traceback(proc)
    assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    return strict_json(proc.stdout)


def assert_loop_sane(cli: CLI, name: str) -> dict[str, Any]:
    """state.json is strict with finite numbers; `ls`/`status --json` work."""
    state = strict_state(cli.home)
    entry = state["loops"][name]
    assert non_finite(entry) == [], entry
    names = [loop["name"] for loop in strict_cli(cli, "ls")["loops"]]
    assert name in names
    status = strict_cli(cli, "status", name)
    assert status["name"] == name
    return status


def assert_others_still_fire(cli: CLI, other: str = "good") -> None:
    """A second, well-behaved loop in the same home still fires."""
    before = len(cli.records(other))
    proc = cli("tick", "--wait")
    no_traceback(proc)
    assert proc.returncode in (0, 1), (proc.stdout, proc.stderr)
    assert len(cli.records(other)) == before + 1, proc.stderr


# -- 1. the decision file ---------------------------------------------------------


def obj(body: str) -> str:
    """A Python bytes literal of a decision object with `body` inside."""
    return repr(('{"version":1,' + body + '}').encode())


CONTINUE = '"decision":"continue","summary":"s","evidence":"e"'

# (id, Python expression of the bytes written, what the record must show):
# "dropped": the note says a field was dropped; "no-decision": decision null and
# the note mentions the decision; "null": decision null; "any": no claim beyond
# the common ones; "complete": the control case.
DECISIONS = [
    ("next-nan", obj(CONTINUE + ',"next_delay_s":NaN'), "dropped"),
    ("next-inf", obj(CONTINUE + ',"next_delay_s":Infinity'), "dropped"),
    ("next-minus-inf", obj(CONTINUE + ',"next_delay_s":-Infinity'), "dropped"),
    ("next-1e308", obj(CONTINUE + ',"next_delay_s":1e308'), "dropped"),
    ("next-negative", obj(CONTINUE + ',"next_delay_s":-5'), "any"),
    ("next-string", obj(CONTINUE + ',"next_delay_s":"soon"'), "dropped"),
    ("next-list", obj(CONTINUE + ',"next_delay_s":[1]'), "any"),
    ("next-object", obj(CONTINUE + ',"next_delay_s":{"a":1}'), "any"),
    ("summary-10mib", "b'{\"version\":1,\"decision\":\"continue\",\"summary\":\"' + b'x' * "
                      f"{10 * MIB} + b'\",\"evidence\":\"e\"}}'", "dropped"),
    ("invalid-utf8", repr(b'\xff\xfe{"version":1,"decision":"complete"}\xc3\x28'), "null"),
    ("non-object-list", repr(b"[]"), "no-decision"),
    ("non-object-string", repr(b'"x"'), "no-decision"),
    ("non-object-number", repr(b"42"), "no-decision"),
    ("unknown-kind", obj('"decision":"explode","summary":"s","evidence":"e"'), "no-decision"),
    ("summary-nested-1000", "b'{\"version\":1,\"decision\":\"continue\",\"summary\":' + "
                            "b'[' * 1000 + b']' * 1000 + b'}'", "any"),
    ("summary-100kib", "b'{\"version\":1,\"decision\":\"continue\",\"summary\":\"' + b'y' * "
                       f"{100 * 1024} + b'\"}}'", "any"),
    ("kind-number", obj('"decision":7,"summary":"s","evidence":"e"'), "no-decision"),
    ("valid-complete", obj('"decision":"complete","summary":"done","evidence":"tests pass"'),
     "complete"),
]


def decision_writer(expr: str) -> str:
    """A `--command` whose agent writes `expr` (bytes) to its decision file."""
    code = ("import os\n"
            "with open(os.environ['LOOPCTL_DECISION_FILE'], 'wb') as f:\n"
            f"    f.write({expr})\n")
    return shlex.join([sys.executable, "-c", code])


@pytest.mark.slow  # several seconds: handed out early, never the tail
@pytest.mark.parametrize("every", ["1h", "auto"])
def test_a_hostile_decision_file_is_contained(cli: CLI, home: Path, with_good: Path,
                                              every: str) -> None:
    """Every hostile decision file in one home, one loop each, each fired by
    its own `loopctl run`; then `good` still fires. (One home for all of them:
    a tick per case cost ~0.35 s of CPU; a case that damaged the shared
    files now also fails every case after it.)"""
    install(with_good, home)
    for case, expr, expect in DECISIONS:
        name = f"bad-{case}"
        cli("start", "p", "--name", name, "--every", every, "--command", decision_writer(expr),
            check=0)
        proc = cli("run", name)
        no_traceback(proc)
        assert proc.returncode in (0, 1), (case, proc.returncode, proc.stderr[-2000:])
        records = cli.records(name)
        assert len(records) == 1, (case, records)
        record = records[0]
        note = record.get("note")
        if expect == "dropped":
            assert isinstance(note, str) and "dropped" in note.lower(), (case, note)
        elif expect in ("no-decision", "null"):
            assert record["decision"] is None, (case, record["decision"])
            if expect == "no-decision":
                assert isinstance(note, str) and "decision" in note.lower(), (case, note)
        status = assert_loop_sane(cli, name)
        if expect == "complete":
            assert proc.returncode == 0, case
            assert record["decision"]["decision"] == "complete", case
            assert status["status"] == "completed", case
    assert_others_still_fire(cli)


# -- 2. session ids ----------------------------------------------------------------

GOOD_SESSION = "4f1c2b9a-7d3e-4a5b-9c8d-0e1f2a3b4c5d"
SESSIONS = [
    pytest.param("--dangerously-skip-permissions", id="bypass-flag"),
    pytest.param("-x", id="short-flag"),
    pytest.param("a b", id="space"),
    pytest.param("../../etc", id="path"),
    pytest.param("a" * 10240, id="10kib"),
    pytest.param("$(touch pwned)", id="shell"),
]


@pytest.fixture
def hostile_claude(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Path]:
    """tests/hostile/bin/claude first on PATH, steered by files in tmp_path."""
    files = {"record": tmp_path / "argv.jsonl", "session": tmp_path / "session",
             "cost": tmp_path / "cost"}
    monkeypatch.setenv("PATH", str(HOSTILE_BIN) + os.pathsep + os.environ["PATH"])
    monkeypatch.setenv("HOSTILE_RECORD", str(files["record"]))
    monkeypatch.setenv("HOSTILE_SESSION_FILE", str(files["session"]))
    monkeypatch.setenv("HOSTILE_COST_FILE", str(files["cost"]))
    files["session"].write_text(GOOD_SESSION)
    files["cost"].write_text("0.01")
    return files


def calls(record: Path) -> list[list[str]]:
    return [json.loads(line)["argv"] for line in record.read_text().splitlines()]


@pytest.mark.parametrize("session", [*SESSIONS, pytest.param(GOOD_SESSION, id="uuid-control")])
def test_a_hostile_session_id_is_never_resumed(cli: CLI, tmp_path: Path,
                                               hostile_claude: dict[str, Path],
                                               session: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    hostile_claude["session"].write_text(session)
    # --sandbox off: the agent records its argv outside its working directory
    # (what a confined agent cannot reach is tests/engine/test_sandbox_hostile.py's).
    cli("start", "p", "--name", "chat", "--agent", "claude", "--every", "1h",
        "--continue-session", "--cwd", str(work), "--sandbox", "off", check=0)
    first = cli("run", "chat")
    no_traceback(first)
    assert first.returncode in (0, 1), first.stderr
    stored = strict_state(cli.home)["loops"]["chat"]["session_id"]
    second = cli("run", "chat")
    no_traceback(second)
    assert second.returncode in (0, 1), second.stderr
    argv = calls(hostile_claude["record"])[1]
    assert "--dangerously-skip-permissions" not in argv
    if session == GOOD_SESSION:
        assert first.returncode == 0 and second.returncode == 0
        assert stored == GOOD_SESSION
        assert argv[argv.index("--resume") + 1] == GOOD_SESSION
    else:
        assert stored is None
        assert session not in argv
        assert not any(a.startswith("--resume") for a in argv), argv
    assert not (work / "pwned").exists()


# -- 3. cost -----------------------------------------------------------------------

COSTS = [
    pytest.param("NaN", id="nan"),
    pytest.param("Infinity", id="inf"),
    pytest.param("-1", id="negative"),
    pytest.param("1e300", id="huge"),
    pytest.param('"0.5"', id="string"),
    pytest.param("true", id="bool"),
]


def spent(cli: CLI, name: str) -> tuple[dict[str, Any], float]:
    status = strict_cli(cli, "status", name)
    value = status["cost_usd"]["spent"]
    assert isinstance(value, (int, float)) and not isinstance(value, bool), value
    assert math.isfinite(value) and value >= 0, value
    return status, value


@pytest.mark.parametrize("cost", COSTS)
def test_a_hostile_cost_never_switches_the_budget_off(cli: CLI,
                                                      hostile_claude: dict[str, Path],
                                                      cost: str) -> None:
    hostile_claude["cost"].write_text(cost)
    cli("start", "p", "--name", "spend", "--agent", "claude", "--every", "1h",
        "--budget-usd", "0.5", "--no-progress", "0", "--sandbox", "off", check=0)
    first = cli("run", "spend")
    no_traceback(first)
    assert first.returncode in (0, 1), first.stderr
    spent(cli, "spend")
    assert non_finite(strict_state(cli.home)["loops"]["spend"]) == []
    # A valid report over the budget pauses the loop, whatever came before.
    hostile_claude["cost"].write_text("0.6")
    second = cli("run", "spend")
    no_traceback(second)
    status, _ = spent(cli, "spend")
    assert (status["status"], status["reason"]) == ("paused", "budget_limit"), status


# -- 4. output floods --------------------------------------------------------------


@pytest.mark.parametrize("agent", ["claude", "command"])
@pytest.mark.parametrize("flood", ["line10m", "badutf8", "deepjson"])
def test_an_output_flood_is_recorded(cli: CLI, hostile_claude: dict[str, Path], agent: str,
                                     flood: str) -> None:
    how = ["--agent", "claude"] if agent == "claude" else [
        "--command", shlex.join([sys.executable, str(FAKE_CLAUDE)])]
    cli("start", "p", "--name", "flood", "--every", "1h", *how, "--env",
        f"HOSTILE_FLOOD={flood}", "--sandbox", "off", check=0)
    # Bytes, not text: the agent's output is copied to this stdout as is.
    proc = subprocess.run(loopctl_argv("run", "flood"), capture_output=True, timeout=60,
                          env=os.environ.copy())
    no_traceback(proc)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    assert len(cli.records("flood")) == 1
    assert_loop_sane(cli, "flood")
