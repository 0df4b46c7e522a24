"""`logs -f` of another machine's run (DESIGN §21, issue 54 "One view"): m1
runs the loop; on m2, `logs` prints what m1's supervisor has sent with its
claim's renewals, and `logs -f` follows it as it grows, then ends when the
run's record reaches the store, with the run's exit code. What arrives is
printed sanitized. Real `loopctl` processes, a real server; a short
LOOPCTL_STORE_RENEW makes renewals often; every wait polls an event."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

from conftest import wait_for
from store.machines import Machine, machines

pytestmark = pytest.mark.real_processes

TALKER = """\
version: 1
store: {dsn}
loops:
  talker:
    prompt: |
      {body}
    agent: shell
    on_demand: true
    cwd: {cwd}
    timeout: 2m
    max_runs: 1000
"""
# Says `first` (and an escape sequence), waits for the test's go, says
# `second`, and exits 3.
BODY = (r"printf 'first \033[31mred\n'; while [ ! -e {go} ]; do sleep 0.05; done; "
        r"echo second; exit 3")
FAST = {"LOOPCTL_STORE_RENEW": "0.3"}


def team(tmp_path: Path, dsn: str) -> list[Machine]:
    group = machines(tmp_path / "machines", 2)
    for machine in group:
        machine.define(TALKER.format(dsn=dsn, cwd=tmp_path,
                                     body=BODY.format(go=tmp_path / "go")))
    assert group[0].run("store", "init").returncode == 0
    return group


class Reader:
    """A process's stdout, read as it comes on a thread of its own."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc, self.text = proc, ""
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for chunk in iter(lambda: self.proc.stdout.readline() if self.proc.stdout else "", ""):
            self.text += chunk


def popen(machine: Machine, *args: str, out: int = subprocess.PIPE) -> subprocess.Popen[str]:
    return subprocess.Popen(machine.argv(*args), stdout=out, stderr=out, text=True,
                            env={**machine.env(), **FAST})


def logs(machine: Machine, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(machine.argv("logs", "talker", *args), capture_output=True,
                          text=True, env={**machine.env(), **FAST}, timeout=60)


def test_logs_f_on_m2_follows_m1s_run_to_its_end_and_exit_code(tmp_path: Path,
                                                                pg_dsn: str) -> None:
    m1, m2 = team(tmp_path, pg_dsn)
    run = popen(m1, "run", "talker", out=subprocess.DEVNULL)  # its output: not read here
    try:
        # Once m1's supervisor has sent its first line, `logs` on m2 shows it.
        said = wait_for(lambda: (p := logs(m2)).returncode == 0 and "first" in p.stdout and p,
                        timeout=60)
        assert "running on machine m1" in said.stdout and "in flight on machine m1" \
            in said.stdout, said.stdout
        follower = Reader(popen(m2, "logs", "talker", "-f"))
        wait_for(lambda: "first" in follower.text, timeout=60)
        assert "second" not in follower.text
        (tmp_path / "go").touch()
        ran = run.wait(timeout=60)
        code = follower.proc.wait(timeout=60)
        follower.thread.join(timeout=10)
    finally:
        run.kill()
    text = follower.text
    assert ran == 1 and code == ran, (ran, code, text)  # `run` and `logs -f` say one code
    assert text.count("first red\n") == 1 and text.index("first red") < text.index("second\n"), text
    assert "ended failed (exit code 3) on machine m1" in text, text
    assert "\x1b" not in text and "first red" in text, text  # printed sanitized
    again = logs(m2, "-f")  # ended now: printed from its record, its code given at once
    assert again.returncode == ran and "first red" in again.stdout, again


# Numbered lines: the first 2,000 paced over a few renewals; then, on the
# test's go, 60,000 more at once (about 420 KiB, made first and written in
# one go: far more than one renewal's 64 KiB tail), then the end.
COUNTED = (r"seq 2001 62000 | sed 's/^/line-/' > {burst}; i=0; while [ $i -lt 2000 ]; do "
           r"seq $((i + 1)) $((i + 100)) | sed 's/^/line-/'; i=$((i + 100)); sleep 0.05; "
           r"done; while [ ! -e {go} ]; do sleep 0.05; done; cat {burst}")


def test_logs_f_prints_each_line_once_in_order_and_says_a_gap(tmp_path: Path,
                                                               pg_dsn: str) -> None:
    """Appends over many renewals arrive whole and once (the follower starts
    before the run ends: it waits for the test's go); a burst past the
    64 KiB a renewal carries is said (`[... N bytes not shown ...]`), never
    glued: the lines shown are strictly in order."""
    m1, m2 = machines(tmp_path / "machines", 2)
    for machine in (m1, m2):
        machine.define(TALKER.format(dsn=pg_dsn, cwd=tmp_path, body=COUNTED.format(
            burst=tmp_path / "burst", go=tmp_path / "go")))
    assert m1.run("store", "init").returncode == 0
    run = popen(m1, "run", "talker", out=subprocess.DEVNULL)  # its output: not read here
    try:
        wait_for(lambda: "running on machine m1" in logs(m2).stdout, timeout=60)
        follower = Reader(popen(m2, "logs", "talker", "-f"))
        wait_for(lambda: "line-2000\n" in follower.text, timeout=60)
        (tmp_path / "go").touch()
        assert run.wait(timeout=120) == 0
        assert follower.proc.wait(timeout=60) == 0
        follower.thread.join(timeout=10)
    finally:
        run.kill()
    numbers = [int(ln.removeprefix("line-")) for ln in follower.text.splitlines()
               if ln.startswith("line-")]
    assert numbers == sorted(set(numbers)), "each line once, in order"
    assert numbers[-1] == 62000 and "bytes not shown ...]" in follower.text
    gaps = [b for a, b in zip(numbers, numbers[1:], strict=False) if b != a + 1]
    assert len(gaps) <= 2, gaps  # the burst's, at most a lagging renewal's besides


def test_a_planted_claim_row_reads_as_nothing_new(tmp_path: Path, pg_dsn: str) -> None:
    """The claim's tail and size are anyone's to write: an offset no log has
    (huge, negative, missing) gives no bytes and no offset past the
    follower's, and a planted tail is never more than 64 KiB."""
    import psycopg

    from loopctl.storage.pg.live_tail import TAIL_BYTES, look

    team(tmp_path, pg_dsn)
    planted = [("a", 1 << 62, b"x" * 10), ("b", -100, b"x" * 10), ("c", None, b"x" * 10),
               ("d", 300_000, b"y" * 200_000)]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for run_id, size, tail in planted:
            conn.execute("INSERT INTO loopctl.slot_claims (loop, slot, run_id, machine, digest, "
                         "log_tail, log_size) VALUES ('talker', %s, %s, 'm1', 'd', %s, %s)",
                         (f"run:{run_id}", run_id, tail, size))
        seen = {run_id: look(conn, "talker", "m1", run_id, 5, 60.0) for run_id, *_ in planted}
    for run_id in "abc":
        assert (seen[run_id].first, seen[run_id].data) == (5, b""), (run_id, seen[run_id])
    assert seen["d"].first == 100_000 and len(seen["d"].data) == TAIL_BYTES
