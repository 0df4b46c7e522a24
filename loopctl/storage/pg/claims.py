"""Claiming a slot in the team store (DESIGN §21): one transaction decides
whether this machine may fire a loop's slot, and takes it.

Two rules, both held by the database rather than by the machines' clocks:

- **one run per slot**: `slot_claims` has (loop, slot) as its key; the
  second machine's insert finds the row and learns which run took it;
- **one definition**: each loop's row in `loop_defs` names the digest of the
  definition it was last run with. A machine whose digest differs does not
  fire, unless its own definition changed since it last ran the loop (it
  was edited or pulled: it is the newer one, and the others now differ).
  A machine that never ran the loop cannot overrule the team's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loopctl.storage.pg.schema import SCHEMA


@dataclass
class Verdict:
    """The store's answer: fire (`refusal` None), or why not."""

    refusal: str | None = None
    taken_by: str | None = None  # "run ID on machine M" when another run took the slot


def claim(conn: Any, loop: str, slot: str | None, run_id: str, machine: str,
          digest: str) -> Verdict:
    """Check the definition and take `slot` (None: only the definition
    is checked)."""
    with conn.transaction():
        differs = _definition_check(conn, loop, machine, digest)
        if differs:
            return Verdict(differs)
        if slot is None:
            return Verdict()
        row = conn.execute(
            # clock_timestamp(): now() is when the transaction began, which
            # in a store home may be before a wait for the state's lock.
            f"INSERT INTO {SCHEMA}.slot_claims (loop, slot, run_id, machine, digest, "
            "claimed_at, renewed_at) VALUES (%s, %s, %s, %s, %s, clock_timestamp(), "
            "clock_timestamp()) ON CONFLICT (loop, slot) DO NOTHING RETURNING 1",
            (loop, slot, run_id, machine, digest)).fetchone()
        if row is not None:
            return Verdict()
        other = conn.execute(
            f"SELECT run_id, machine FROM {SCHEMA}.slot_claims WHERE loop = %s AND slot = %s",
            (loop, slot)).fetchone()
    taken = f"run {other[0]} on machine {other[1]}"
    return Verdict(f"already ran: {taken}", taken)


def _definition_check(conn: Any, loop: str, machine: str, digest: str) -> str | None:
    """None when this machine may run `loop` as it defines it (and the
    store now says so); else why not. The loop's row is locked for the
    rest of the transaction, so two machines decide one after the other."""
    conn.execute(f"INSERT INTO {SCHEMA}.loop_defs (loop, digest, machine) VALUES (%s, %s, %s) "
                 "ON CONFLICT (loop) DO NOTHING", (loop, digest, machine))
    team_digest, team_machine = conn.execute(
        f"SELECT digest, machine FROM {SCHEMA}.loop_defs WHERE loop = %s FOR UPDATE",
        (loop,)).fetchone()
    mine = conn.execute(f"SELECT digest FROM {SCHEMA}.machine_defs WHERE machine = %s "
                        "AND loop = %s", (machine, loop)).fetchone()
    if team_digest != digest and (mine is None or mine[0] == digest):
        return f"definition differs from the one machine {team_machine} last ran"
    conn.execute(f"UPDATE {SCHEMA}.loop_defs SET digest = %s, machine = %s, at = now() "
                 "WHERE loop = %s", (digest, machine, loop))
    conn.execute(f"INSERT INTO {SCHEMA}.machine_defs (machine, loop, digest) "
                 "VALUES (%s, %s, %s) ON CONFLICT (machine, loop) DO UPDATE "
                 "SET digest = EXCLUDED.digest", (machine, loop, digest))
    return None


def known_machines(conn: Any) -> set[str]:
    """Every machine that has run a loop on this store."""
    rows = conn.execute(f"SELECT machine FROM {SCHEMA}.machine_defs UNION "
                        f"SELECT machine FROM {SCHEMA}.slot_claims").fetchall()
    return {str(row[0]) for row in rows}


def renew(conn: Any, loop: str, run_id: str, stale_s: float) -> Renewal:
    """The run's claim is still held: its heartbeat, now. Not `held` when it
    is no longer ours to renew: another machine recorded the run lost, or it
    went stale (a machine frozen past the window may have been judged
    dead already: it must not come back to life). `kill_by`: the machine a
    `stop --kill` of this run was asked on (untrusted text: the caller
    bounds it)."""
    row = conn.execute(
        f"UPDATE {SCHEMA}.slot_claims SET renewed_at = clock_timestamp() WHERE loop = %s "
        "AND run_id = %s AND lost_at IS NULL "
        "AND renewed_at > clock_timestamp() - make_interval(secs => %s) "
        "RETURNING kill_requested_at IS NOT NULL, left(kill_requested_by, 100)",
        (loop, run_id, stale_s)).fetchone()
    if row is None:
        return Renewal(held=False)
    return Renewal(held=True, kill_by=str(row[1] or "another machine") if row[0] else None)


@dataclass
class Renewal:
    held: bool
    kill_by: str | None = None  # a kill was asked for, on this machine


def request_kill(conn: Any, loop: str, run_id: str, machine: str, stale_s: float) -> bool:
    """Ask the supervisor of `run_id` (another machine's) to kill its agent:
    it sees the request at its next renewal. False when the claim is not
    live (stale or lost: a driver records the run lost instead)."""
    row = conn.execute(
        f"UPDATE {SCHEMA}.slot_claims SET kill_requested_at = clock_timestamp(), "
        "kill_requested_by = %s WHERE loop = %s AND run_id = %s AND lost_at IS NULL "
        "AND renewed_at > clock_timestamp() - make_interval(secs => %s) RETURNING 1",
        (machine, loop, run_id, stale_s)).fetchone()
    return row is not None
