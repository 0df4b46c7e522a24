"""Fault 16: agents that misbehave on their standard streams. Each run is
recorded correctly (outcome ok) and its log holds the bytes, both for
scheduled runs (output straight into the log) and for `loopctl run` (output
copied to the terminal and the log). A 200 MB flood is in tests/engine/test_firing.py
(test_log_holds_a_large_flood_of_output)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import CLI, agent_command, loopctl_argv

PROMPT_BYTES = 2**20
LINE_BYTES = 10 * 2**20

CASES = {
    # The prompt (1 MiB, no {prompt} placeholder: on stdin) is never read.
    "never-reads-stdin": (("--print", "done", "--sleep", "0.2"), [b"done\n"]),
    "closes-stdout-early": (("--print", "before", "--close-stdout", "--sleep", "0.3",
                             "--stderr", "after"), [b"before\n", b"after\n"]),
    "invalid-utf8": (("--invalid-utf8",), [b"bad bytes: \xff\xfe\xc3\x28\n"]),
    "10mb-single-line": (("--line", str(LINE_BYTES)), [b"y" * LINE_BYTES + b"\n"]),
}


@pytest.fixture
def big_prompt(tmp_path: Path) -> Path:
    prompt = tmp_path / "prompt.md"
    prompt.write_text("a line of the prompt, 32 bytes.\n" * (PROMPT_BYTES // 32))
    return prompt


@pytest.mark.parametrize("driver", ["tick", "run"])
@pytest.mark.parametrize("case", list(CASES))
def test_misbehaving_agent_output_is_recorded(cli: CLI, big_prompt: Path, case: str,
                                             driver: str) -> None:
    args, expected = CASES[case]
    cli("start", "--prompt-file", str(big_prompt), "--name", "odd", "--every", "1h",
        "--command", agent_command(*args), check=0)
    if driver == "tick":
        proc = cli("tick", "--wait", "--json")
        assert proc.returncode == 0, proc.stderr
        (record,) = json.loads(proc.stdout)["runs"]
    else:
        out = subprocess.run(loopctl_argv("run", "odd"), capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert b"Traceback" not in out.stderr
        for chunk in expected:
            if b"after" not in chunk:  # stderr goes to the log, not the terminal's stdout
                assert chunk.strip(b"\n") in out.stdout
        (record,) = cli.records("odd")
    assert (record["outcome"], record["exit_code"]) == ("ok", 0), record
    log = Path(record["log"]).read_bytes()
    assert log.startswith(expected[0]), (case, log[:80])  # the agent's bytes come first
    for chunk in expected:
        assert chunk in log, (case, chunk[:40])
    assert log.rstrip(b"\n").splitlines()[-1].startswith(b"# loopctl: run ")  # the footer


def test_agent_reading_a_big_prompt_on_stdin_gets_all_of_it(
        cli: CLI, big_prompt: Path, tmp_path: Path) -> None:
    seen = tmp_path / "seen.jsonl"
    cli("start", "--prompt-file", str(big_prompt), "--name", "reader", "--every", "1h",
        "--command", agent_command("--record", str(seen)), check=0)
    report = cli.json("tick", "--wait")
    assert [r["outcome"] for r in report["runs"]] == ["ok"]
    assert json.loads(seen.read_text())["stdin"] == big_prompt.read_text()
