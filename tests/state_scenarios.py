"""Real state.json files, written by real `loopctl` processes, for the
byte-for-byte check of the LoopState record's JSON
(tests/domain/test_loop_state_bytes.py).

`python -m tests.state_scenarios HOME` runs the run record's scenarios
(tests/run_record_scenarios: ok, failed, a failed check, a gate that
skipped, a run found lost) and then pause, resume, stop, a manual trigger
and a hand-damaged entry that loopctl repairs, under LOOPCTL_HOME=HOME; after
each step it prints state.json's bytes with what differs from one run to
the next (POSIX times, run ids, pids, the home's path, the defs signature)
replaced by placeholders and nothing else touched: key order, spacing, which
fields are left out and every value loopctl chose are compared. Run by an
older loopctl (PYTHONPATH at its checkout, from outside this checkout), it
gives what that version wrote: tests/samples/state_files.txt was made so
from main.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from tests import run_record_scenarios as runs

VARYING = [(re.compile(rb"\d{8}T\d{6}Z-\d{4}"), b"<RUN_ID>"),
           (re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"), b"<TIME>"),
           # POSIX seconds (times, a process's start time): ten digits on.
           (re.compile(rb"\b1\d{9}(\.\d+)?(e[+-]?\d+)?\b"), b"<T>"),
           (re.compile(rb'"pid":\d+'), b'"pid":<PID>'),
           (re.compile(rb'"defs_sig":\[[^\]]*\]'), b'"defs_sig":<SIG>'),
           (re.compile(rb'"queued_s":[0-9.e-]+'), b'"queued_s":<S>'),
           # The tally's run durations (DESIGN §19).
           (re.compile(rb'"sum":[0-9.e-]+'), b'"sum":<S>'),
           (re.compile(rb'"buckets":\[[0-9,]*\]'), b'"buckets":<B>')]


def _snapshot(home: Path, label: str, out: list[bytes]) -> None:
    data = (home / "state" / "state.json").read_bytes().replace(str(home).encode(), b"<HOME>")
    data = data.replace(str(runs.FAKE_AGENT).encode(), b"<AGENT>")
    data = data.replace(json.dumps(sys.executable)[1:-1].encode(), b"<PYTHON>")
    for pattern, placeholder in VARYING:
        data = pattern.sub(placeholder, data)
    out.append(b"== " + label.encode() + b"\n" + data.rstrip(b"\n") + b"\n")


def _damage(home: Path) -> None:
    """An entry hand-edited to a bad count: the next reader repairs it."""
    path = home / "state" / "state.json"
    state = json.loads(path.read_bytes())
    state["loops"]["gated"]["iterations"] = -1
    path.write_text(json.dumps(state))


STEPS: list[tuple[str, list[str]]] = [
    ("pause ok", ["pause", "ok"]),
    ("resume ok", ["resume", "ok"]),
    ("stop failed", ["stop", "failed"]),
    ("run checked again", ["run", "checked"]),
    ("tick", ["tick"]),
]


def run_all(home: Path) -> bytes:
    out: list[bytes] = []
    runs.run_all(home)
    _snapshot(home, "after the run record scenarios", out)
    for label, args in STEPS:
        runs.loopctl(home, *args)  # exit codes are the commands', not checked
        _snapshot(home, label, out)
    _damage(home)
    runs.loopctl(home, "pause", "lost")  # reads every entry, repairs, writes
    _snapshot(home, "pause lost after a damaged entry", out)
    runs.loopctl(home, "resume", "gated")
    _snapshot(home, "resume gated", out)
    return b"".join(out)


if __name__ == "__main__":
    sys.stdout.buffer.write(run_all(Path(sys.argv[1])))
