"""`logs NAME [-f]` while another machine runs NAME (DESIGN §21): the log as
that machine's supervisor sends it to the team store with each renewal of
its claim (storage/pg/live_tail.py), printed as it arrives, until the
run's record reaches the store; then the log's last lines from the record
and the run's exit code, as a local `logs -f` gives it.

The store asks nothing more often than a renewal (LOOPCTL_STORE_RENEW):
nothing new can have arrived sooner. What arrives is untrusted (any
machine with the password writes there): printed a whole line at a time,
each through the one sanitizer, and a gap (a follower that fell more than
64 KiB behind) said rather than hidden."""

from __future__ import annotations

import sys
import time
from typing import Any

from loopctl.storage.store import Store

LINE_MOST = 64 * 1024  # a line longer than this is printed in pieces


def foreign_run(run: dict[str, Any], run_id: str | None) -> dict[str, Any] | None:
    """`run`, a loop's run in flight as the state has it ({}: none), when
    another machine runs it (and it is the one asked for); None otherwise."""
    if not run.get("machine") or not isinstance(run.get("run_id"), str) \
            or run_id not in (None, run["run_id"]):
        return None  # a home of files' runs say no machine: no store module is loaded
    from loopctl.commands.team_runs import machine_of
    from loopctl.storage.pg.dsn import machine

    owner = machine_of(run["machine"])
    return run if owner is not None and owner != machine() else None


class Printer:
    """Untrusted bytes out as sanitized lines; a partial line waits for its end."""

    def __init__(self) -> None:
        self.pending = b""

    def add(self, data: bytes) -> None:
        self.pending += data
        cut = self.pending.rfind(b"\n") + 1
        if cut == 0 and len(self.pending) < LINE_MOST:
            return
        cut = cut or len(self.pending)
        self._out(self.pending[:cut])
        self.pending = self.pending[cut:]

    def end(self) -> None:
        if self.pending:
            self._out(self.pending + b"\n")
        self.pending = b""

    @staticmethod
    def _out(data: bytes) -> None:
        from loopctl.domain.untrusted import block

        sys.stdout.write(block(data.decode("utf-8", "replace")))
        sys.stdout.flush()


def follow(s: Store, name: str, run: dict[str, Any], keep_following: bool) -> int:
    """Print another machine's run in flight (following it to its end with
    `keep_following`); the exit code `logs` gives."""
    from loopctl.cli.run_views import live_run
    from loopctl.commands.team_runs import read_store
    from loopctl.settings import knob
    from loopctl.storage.pg.live_tail import look

    owner, run_id = str(run["machine"]), str(run["run_id"])
    renew_s, stale_s = knob("LOOPCTL_STORE_RENEW"), knob("LOOPCTL_STORE_STALE")
    print(_header(name, run, owner), flush=True)
    printer, have, gone_at = Printer(), 0, None
    while True:
        seen = read_store(s, look, name, owner, run_id, have, stale_s)
        if seen.first > have:
            printer.end()
            print(f"[... {seen.first - have} bytes not shown ...]", flush=True)
        if seen.data:
            printer.add(seen.data)
            have = seen.first + len(seen.data)
        if seen.ended:
            return _ended(s, name, owner, run_id, have, printer)
        if not keep_following:
            printer.end()
            print(f"# loopctl: run {run_id} is in flight on machine {owner}; "
                  f"`loopctl logs -f {name}` follows it", flush=True)
            return 0
        if not seen.live and foreign_run(live_run(s.read_state(), name), run_id) is None:
            gone_at = gone_at or time.monotonic()  # its record may be on its way
            if time.monotonic() - gone_at > stale_s:
                printer.end()
                raise _no_record(name, run_id, owner)
        time.sleep(renew_s)


def _header(name: str, run: dict[str, Any], owner: str) -> str:
    from loopctl.domain.timestamps import iso
    from loopctl.domain.untrusted import line

    said = f"# loopctl: run {run['run_id']} of {name}"
    if isinstance(run.get("iteration"), int):
        said += f" (iteration {run['iteration']})"
    started = run.get("started_at")
    if isinstance(started, (int, float)):
        said += f", started {iso(started)}"
    return line(said + f": running on machine {owner}; its log follows as that machine "
                "sends it to the team store")


def _ended(s: Store, name: str, owner: str, run_id: str, have: int,
           printer: Printer) -> int:
    """The rest of the log from the run's record, and its exit code."""
    from loopctl.commands.team_runs import cleaned, read_store
    from loopctl.engine.supervisor import exit_code_for
    from loopctl.storage.pg.live_tail import final_of
    from loopctl.storage.pg.runs import StoredRun

    record, tail, size = read_store(s, final_of, name, owner, run_id)
    if size is not None and size - len(tail) > have:
        printer.end()
        print(f"[... {size - len(tail) - have} bytes not shown ...]", flush=True)
    if size is not None:
        printer.add(tail[max(0, len(tail) - (size - have)):] if size > have else b"")
    printer.end()
    found = cleaned(name, StoredRun(owner, run_id, record, None))
    if found is None or found.outcome is None:
        raise _no_record(name, run_id, owner)
    print(f"# loopctl: run {run_id} ended {found.outcome} (exit code {found.exit_code}) on "
          f"machine {owner}", flush=True)
    return exit_code_for(found)


def _no_record(name: str, run_id: str, owner: str) -> Exception:
    from loopctl.domain.errors import LoopctlError

    return LoopctlError(f"run {run_id} of {name} is no longer running on machine {owner} and "
                        "its record has not reached the team store (that machine keeps it; "
                        "a driver records a run whose claim went stale as lost)", 1)
