"""The store's schema: an ordered list of migrations and a table holding
how many of them ran. `loopctl store init` runs the missing ones, all in
one transaction under an advisory lock (two inits at once: one migrates,
the other finds it done). A store migrated by a newer loopctl than this one
fails closed: this code does not know what the newer tables mean."""

from __future__ import annotations

from loopctl.domain.errors import UnreadableError

TYPE_CHECKING = False  # not `typing`: the idle tick imports this module

if TYPE_CHECKING:
    from typing import Any

SCHEMA = "loopctl"
# Each entry is one version: index 0 makes version 1. Append only: a
# released migration is never edited (stores out there already ran it).
MIGRATIONS: tuple[str, ...] = (
    f"""
    CREATE TABLE {SCHEMA}.schema_version (
        only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
        version integer NOT NULL,
        migrated_at timestamptz NOT NULL DEFAULT now(),
        migrated_by text NOT NULL
    )
    """,
    # 2: slot claims (DESIGN §20-21), one row per (loop, slot) whatever the
    # machine; the definition each loop was last run with, and the one each
    # machine last ran (who changed it: see claims.py).
    f"""
    CREATE TABLE {SCHEMA}.slot_claims (
        loop text NOT NULL,
        slot text NOT NULL,
        run_id text NOT NULL,
        machine text NOT NULL,
        digest text NOT NULL,
        claimed_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (loop, slot)
    );
    CREATE TABLE {SCHEMA}.loop_defs (
        loop text PRIMARY KEY,
        digest text NOT NULL,
        machine text NOT NULL,
        at timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE {SCHEMA}.machine_defs (
        machine text NOT NULL,
        loop text NOT NULL,
        digest text NOT NULL,
        PRIMARY KEY (machine, loop)
    )
    """,
    # 3: a claim's heartbeat, renewed by the run's supervisor (engine/team_fence).
    f"""
    ALTER TABLE {SCHEMA}.slot_claims
        ADD COLUMN renewed_at timestamptz NOT NULL DEFAULT now()
    """,
    # 4: every machine's run records and skipped slots, for the team's views
    # (storage/pg/runs.py). A run is one row per (loop, machine, run_id): run
    # ids are counted per machine, and a `lost` record the supervisor later
    # replaces with its own is the same row. A skipped slot is keyed by the
    # id its machine gave it, so sending it again after an outage is a no-op.
    f"""
    CREATE TABLE {SCHEMA}.runs (
        loop text NOT NULL,
        machine text NOT NULL,
        run_id text NOT NULL,
        record jsonb NOT NULL,
        log_path text,
        log_tail bytea,
        log_cut boolean NOT NULL DEFAULT false,
        recorded_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (loop, machine, run_id)
    );
    CREATE INDEX runs_newest ON {SCHEMA}.runs (loop, recorded_at DESC);
    CREATE TABLE {SCHEMA}.skipped_slots (
        skip_id text PRIMARY KEY,
        loop text NOT NULL,
        machine text NOT NULL,
        entry jsonb NOT NULL,
        recorded_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX skipped_slots_newest ON {SCHEMA}.skipped_slots (loop, recorded_at DESC)
    """,
    # 5: loop state shared by every machine (storage/pg/state.py): one row
    # per loop, the team's top-level keys (the account holds), each
    # machine's own in a row of its own, and a claim's run found lost
    # (renewing it fails from then on).
    f"""
    CREATE TABLE {SCHEMA}.loop_state (
        loop text PRIMARY KEY,
        entry jsonb NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT now(),
        updated_by text NOT NULL
    );
    CREATE TABLE {SCHEMA}.team_state (
        key text PRIMARY KEY,
        value jsonb NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT now(),
        updated_by text NOT NULL
    );
    CREATE TABLE {SCHEMA}.machine_state (
        machine text PRIMARY KEY,
        top jsonb NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT now()
    );
    ALTER TABLE {SCHEMA}.slot_claims ADD COLUMN lost_at timestamptz
    """,
    # 6: `stop --kill` of another machine's run, asked on its claim (the
    # owner's fence acts at its next renewal: engine/team_fence.py), and a
    # trigger's payload and a person's answer kept for whichever machine
    # fires next (storage/pg/texts.py), one pending of each kind per loop.
    f"""
    ALTER TABLE {SCHEMA}.slot_claims
        ADD COLUMN kill_requested_at timestamptz,
        ADD COLUMN kill_requested_by text;
    CREATE TABLE {SCHEMA}.pending_texts (
        loop text NOT NULL,
        kind text NOT NULL,
        body bytea NOT NULL,
        machine text NOT NULL,
        at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (loop, kind)
    )
    """,
    # 7: the team's next wake (storage/pg/state.py keeps it in the
    # transaction of every state write, as summary.json is kept for
    # state.json): a store home's `tick` reads this one row, without the
    # state lock, to prove nothing is due (storage/pg/idle.py). No row: the
    # full path decides.
    f"""
    CREATE TABLE {SCHEMA}.team_wake (
        only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
        wake_at double precision,
        busy boolean NOT NULL,
        saved_at double precision NOT NULL,
        version bigint NOT NULL DEFAULT 1
    )
    """,
    # 8: GitHub deliveries every machine's `serve` has seen, each under its
    # id and its body's digest (storage/pg/deliveries.py): a unique key is
    # the once-point across machines; `seq` orders them for the pruning.
    f"""
    CREATE TABLE {SCHEMA}.webhook_deliveries (
        key text PRIMARY KEY,
        seq bigserial NOT NULL,
        state text NOT NULL CHECK (state IN ('flying', 'partial', 'done')),
        fired text[] NOT NULL DEFAULT '{{}}',
        machine text NOT NULL,
        token text NOT NULL,
        at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX webhook_deliveries_seq ON {SCHEMA}.webhook_deliveries (seq)
    """,
    # 9: a run's log while it runs (storage/pg/live_tail.py): its supervisor
    # sends what its log gained with each renewal of the claim (the last
    # 64 KiB of it, and the log's size at its end), for `logs -f` on another
    # machine; a run's record says its log's final size, to end the follow.
    f"""
    ALTER TABLE {SCHEMA}.slot_claims ADD COLUMN log_tail bytea, ADD COLUMN log_size bigint;
    ALTER TABLE {SCHEMA}.runs ADD COLUMN log_size bigint
    """,
    # 10: claims found by their run (each renewal, a kill request, every
    # driver pass's liveness check of other machines' runs), not by a scan of
    # every slot a loop ever claimed.
    f"CREATE INDEX slot_claims_run ON {SCHEMA}.slot_claims (run_id, loop)",
)
CODE_VERSION = len(MIGRATIONS)
# pg_advisory_xact_lock's key: any constant every loopctl agrees on.
MIGRATION_LOCK = 0x6C6F6F70  # "loop"
# The lock every read-modify-write of the shared loop state holds (state.py).
STATE_LOCK = 0x73746174  # "stat"


class SchemaState:
    """What the store holds compared with what this code knows. (Not a
    dataclass: the idle tick imports this module for CODE_VERSION, and
    dataclasses' import is ~4 ms of its ~40.)"""

    def __init__(self, found: int, known: int = CODE_VERSION) -> None:
        self.found = found  # 0: never initialised
        self.known = known

    def __repr__(self) -> str:
        return f"SchemaState(found={self.found}, known={self.known})"

    @property
    def ready(self) -> bool:
        return self.found == self.known

    def problem(self, where: str) -> str | None:
        """One line saying why this store cannot be used, with the fix."""
        if self.found == 0:
            return f"store {where} has no loopctl schema: run `loopctl store init`"
        if self.found < self.known:
            return (f"store {where} has schema version {self.found}, this loopctl needs "
                    f"{self.known}: run `loopctl store init` to migrate it")
        if self.found > self.known:
            return (f"store {where} has schema version {self.found}, newer than this loopctl "
                    f"knows ({self.known}): upgrade loopctl on this machine; nothing was "
                    "written")
        return None


def read_version(conn: Any) -> int:
    """The schema version in the store; 0 when loopctl never set it up."""
    row = conn.execute("SELECT to_regclass(%s)", (f"{SCHEMA}.schema_version",)).fetchone()
    if row is None or row[0] is None:
        return 0
    found = conn.execute(f"SELECT version FROM {SCHEMA}.schema_version").fetchone()
    return int(found[0]) if found else 0


def check(conn: Any, where: str) -> SchemaState:
    """The store's schema state; an UnreadableError (exit 3) unless it is
    exactly the version this code knows."""
    state = SchemaState(read_version(conn))
    problem = state.problem(where)
    if problem:
        raise UnreadableError(problem)
    return state


def migrate(conn: Any, machine: str, where: str) -> tuple[int, int]:
    """Bring the store to CODE_VERSION; (version before, version after).
    Refuses, writing nothing, a store newer than this code."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        before = read_version(conn)
        if before > CODE_VERSION:
            raise UnreadableError(SchemaState(before).problem(where) or "")
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        for statement in MIGRATIONS[before:]:
            conn.execute(statement)
        conn.execute(
            f"INSERT INTO {SCHEMA}.schema_version (version, migrated_by) VALUES (%s, %s) "
            "ON CONFLICT (only_row) DO UPDATE SET version = EXCLUDED.version, "
            "migrated_at = now(), migrated_by = EXCLUDED.migrated_by",
            (CODE_VERSION, machine))
    return before, CODE_VERSION
