"""Real runs whose records have every part a run writes itself (a gate, a
check with a metric, a complete the check refused, `--until-check`'s
decision), for the byte-for-byte check of what `history --json` and
`status --json` show of them (tests/engine/test_run_parts_views.py).

`python -m tests.run_parts_scenarios HOME` runs them under LOOPCTL_HOME=HOME
and prints what the views printed, what differs per run replaced as in
tests/run_record_scenarios.py. Run by main's checkout (PYTHONPATH at it), it
gave tests/samples/run_parts_views.txt.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.run_record_scenarios import FAKE_AGENT, VARYING, agent, loopctl

# What `status --json` shows of a record's parts and the state's.
STATUS_KEYS = ("last_decision", "last_check", "check", "gate")
SCENARIOS: dict[str, list[str]] = {
    # The agent says complete; the check fails with a metric: refused.
    "refused": ["--command", agent("--decide", "complete", "--summary", "done", "--exit", "0"),
                "--check", "sh -c 'echo coverage: 7.5; exit 1'",
                "--check-metric", "coverage: ([0-9.]+)", "--if", "echo gate said"],
    # A check that passes completes the loop whatever the agent said.
    "until": ["--command", agent("--decide", "continue", "--exit", "0"),
              "--check", "sh -c 'echo coverage: 9'", "--check-metric", "coverage: ([0-9.]+)",
              "--until-check"],
    # A check that cannot start says why, in the record and in the state.
    "missing": ["--command", agent("--exit", "0"), "--check", "no-such-checker-x --all"],
}


def run_all(home: Path) -> None:
    (home / "home").mkdir(parents=True, exist_ok=True)
    for name, options in SCENARIOS.items():
        loopctl(home, "start", "work", "--name", name, "--every", "1h", "--cwd", str(home),
                *options, check=True)
        loopctl(home, "run", name)  # its exit code is the scenario's, not checked


def views(home: Path) -> bytes:
    out = []
    for name in SCENARIOS:
        history = loopctl(home, "history", name, "--json", check=True).stdout
        status = json.loads(loopctl(home, "status", name, "--json", check=True).stdout)
        shown = json.dumps({key: status.get(key) for key in STATUS_KEYS}, indent=2)
        out.append(f"== {name} history\n{history.rstrip()}\n== {name} status\n{shown}\n")
    data = "".join(out).encode().replace(str(home).encode(), b"<HOME>")
    data = data.replace(str(FAKE_AGENT).encode(), b"<AGENT>")
    data = data.replace(sys.executable.encode(), b"<PYTHON>")
    for pattern, placeholder in VARYING:
        data = pattern.sub(placeholder, data)
    return data


if __name__ == "__main__":
    target = Path(sys.argv[1])
    run_all(target)
    sys.stdout.buffer.write(views(target))
