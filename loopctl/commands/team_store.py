"""`loopctl store init` and `loopctl store status`: results as records, the
CLI renders them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from loopctl.domain.errors import LoopctlError
from loopctl.storage.pg import schema
from loopctl.storage.pg.team import TeamStore, of_home

NO_STORE = ("no store is set: this home keeps its state in files; set `store: "
            "postgresql://USER@HOST/DB` at the top of loops.yaml or LOOPCTL_STORE")


@dataclass
class InitResult:
    store: str
    machine: str
    before: int
    after: int

    def to_json(self) -> dict[str, Any]:
        return {"version": 1, **asdict(self)}


@dataclass
class StatusResult:
    store: str | None
    machine: str | None
    reachable: bool
    schema_version: int | None
    code_version: int
    problem: str | None
    server: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.store is None or self.problem is None

    def to_json(self) -> dict[str, Any]:
        return {"version": 1, "ok": self.ok, **asdict(self)}


def _team_or_refuse() -> TeamStore:
    team = of_home()
    if team is None:
        raise LoopctlError(NO_STORE, 2)
    return team


def init() -> InitResult:
    team = _team_or_refuse()
    conn = team.connect()
    try:
        before, after = schema.migrate(conn, team.machine, team.shown)
    finally:
        conn.close()
    return InitResult(team.shown, team.machine, before, after)


def status() -> StatusResult:
    from loopctl.storage.pg.connect import StoreUnreachable

    team = of_home()
    if team is None:
        return StatusResult(None, None, False, None, schema.CODE_VERSION, None)
    try:
        conn = team.connect()
    except StoreUnreachable as exc:
        return StatusResult(team.shown, team.machine, False, None, schema.CODE_VERSION,
                            exc.message)
    try:
        found = schema.SchemaState(schema.read_version(conn))
        server = conn.execute("SHOW server_version").fetchone()[0]
        warnings = _glob_warnings(conn, team.machine) if found.ready else []
    finally:
        conn.close()
    return StatusResult(team.shown, team.machine, True, found.found, found.known,
                        found.problem(team.shown), str(server), warnings)


def _glob_warnings(conn: Any, machine: str) -> list[str]:
    """A `machines:` glob that matches no machine the store has seen (nor
    this one): a typo there leaves the loop firing nowhere."""
    from loopctl.domain.team import machines_of, unmatched
    from loopctl.storage.pg.claims import known_machines
    from loopctl.storage.store import Store

    known = known_machines(conn) | {machine}
    said = []
    for name, loop in sorted(Store().read_defs().loops.items()):
        for glob in unmatched(machines_of(loop), known):
            said.append(f"loop {name}: machines glob {glob!r} matches no machine "
                        f"(known: {', '.join(sorted(known))})")
    return said
