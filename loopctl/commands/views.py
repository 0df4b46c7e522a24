"""The reading commands: the LOOP object, `ls`, `status`, `show`,
`history`, `events` (`validate`: commands/validation.py). They never write.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loopctl.commands.common import JSON_VERSION, snapshot
from loopctl.domain.checks import check_name
from loopctl.domain.durations import parse_duration
from loopctl.domain.errors import LoopctlError, NoSuchLoop
from loopctl.domain.model import LoopDef
from loopctl.domain.result import Result
from loopctl.domain.run_record import RunRecord
from loopctl.domain.state import LoopState, display_status, entries_of, fields_of
from loopctl.domain.timestamps import iso, parse_iso
from loopctl.domain.untrusted import mask
from loopctl.fast.data_class import record
from loopctl.storage.paths import is_loop_name
from loopctl.storage.pg.gate import home_has_store as team_home
from loopctl.storage.store import Store

if TYPE_CHECKING:  # imported by the commands that show one loop: `ls` needs neither
    from loopctl.commands.loop_view import InvalidLoop, LoopObject
    from loopctl.domain.skipped import SkippedSlot
    from loopctl.engine.accounts import Held


def describe(loop: LoopDef, st: LoopState, now: float,
             held: dict[str, Held] | None = None) -> LoopObject:
    """The LOOP object of one loop (documented in the README): the columns
    of `loop_columns` for this one loop. An invalid entry is an InvalidLoop."""
    from loopctl.commands.loop_view import LoopObject

    return LoopObject.from_fields({key: column[0] for key, column
                                   in loop_columns([loop], [st], now, held).items()})


def held_loops(store: Store, defs: Any, state: dict[str, Any],
               now: float) -> dict[str, Held]:
    """The loops their account holds (DESIGN §18); nothing to work out, and
    nothing imported, while no account is marked."""
    if not state.get("accounts"):
        return {}
    from loopctl.engine.accounts import held_view

    return held_view(store, defs.loops, state, now)


def loop_columns(loops: list[LoopDef], states: list[LoopState] | list[dict[str, Any]],
                 now: float,
                 held: dict[str, Held] | None = None) -> dict[str, list[Any]]:
    """The LOOP object of each loop (reconciled state entries, in the same
    order), a field at a time: `ls --json` of 10,000 loops builds columns
    and writes them (fast/jsontext.Table) without a mapping per loop. The
    one definition of the shape (commands/loop_object.py): `describe` is
    this for one loop. `held`: the loops an account holds, shown `held`
    (held_loops)."""
    from loopctl.commands import loop_object

    loop, entry = loop_object.readers(loops, states)
    columns = loop_object.columns(loop, entry, [one.schedule_text() for one in loops], now)
    if held:
        _show_held(columns, held)
    return columns


def _show_held(columns: dict[str, list[Any]], held: dict[str, Held]) -> None:
    for key in ("status", "reason", "held", "note", "rate_limited_until"):
        columns[key] = list(columns[key])  # plain lists: one may be a loop_object.Same
    for i, name in enumerate(columns["name"]):
        shown = held.get(name)
        if shown is not None:
            columns["status"][i], columns["reason"][i] = "held", shown.kind
            columns["held"][i], columns["note"][i] = shown.to_json(), shown.note
            columns["rate_limited_until"][i] = shown.until


def masked(raw: Any) -> Any:
    """A definition as shown: notification URLs hold tokens, and so may env
    values (`--env ANTHROPIC_API_KEY=sk-...`); `show --reveal` prints them."""
    if not isinstance(raw, dict):
        return raw
    out = dict(raw)
    if raw.get("notify") is not None:
        urls = raw["notify"] if isinstance(raw["notify"], list) else [raw["notify"]]
        out["notify"] = [mask(u) if isinstance(u, str) else "****" for u in urls]
    if isinstance(raw.get("env"), dict):
        out["env"] = {k: None if v is None else "****" for k, v in raw["env"].items()}
    elif raw.get("env") is not None:
        out["env"] = "****"
    return out


def list_loops(store: Store) -> list[dict[str, Any]]:
    listed = list_columns(store)
    if isinstance(listed, list):
        return listed
    return [dict(zip(listed, row, strict=True)) for row in zip(*listed.values(), strict=True)]


def list_columns(store: Store) -> dict[str, list[Any]] | list[dict[str, Any]]:
    """Every loop's LOOP object, in file order: as columns (`loop_columns`)
    when every loop is valid, else as a list (an invalid loop has three
    fields)."""
    from loopctl.commands import listing, loop_object

    fast = listing.loop_readers(store)
    if fast is not None:  # from the cache's listed fields and the packed entries
        readers, every, errors = fast
        columns = _with_reasons(store, loop_object.columns(*readers))
        return _with_invalid(columns, every, errors) if errors else columns
    defs, state, now = snapshot(store)
    names, entries, invalid = defs.names, state["loops"], defs.invalid
    held = held_loops(store, defs, state, now)
    if any(name in invalid for name in names):
        from loopctl.commands.loop_view import InvalidLoop

        listed = [InvalidLoop(name=str(name), error=invalid[name]).as_loop()
                  if name in invalid else
                  with_reason(store, describe(defs.loops[name], entries[name], now,
                                              held=held)).as_loop()
                  for name in names]
        return _with_machines(store, listed, entries)
    valid = [entries[name] for name in names]
    columns = _with_reasons(store, loop_columns([defs.loops[name] for name in names],
                                                valid, now, held))
    if team_home(store):  # which machine runs each loop, or ran it last (DESIGN §21)
        from loopctl.commands.team_view import run_machines

        columns["machine"] = run_machines(store, list(names), valid)
    return columns


def _with_machines(store: Store, listed: list[dict[str, Any]],
                   entries: dict[str, Any]) -> list[dict[str, Any]]:
    """`machine` in each valid loop's object, in a home with a team store."""
    if not team_home(store):
        return listed
    from loopctl.commands.team_view import run_machines

    valid = [loop for loop in listed if loop.get("status") != "invalid"]
    names = [str(loop["name"]) for loop in valid]
    for loop, machine in zip(valid, run_machines(store, names, [entries[n] for n in names]),
                             strict=True):
        loop["machine"] = machine
    return listed


def _with_invalid(columns: dict[str, list[Any]], names: list[str],
                  invalid: dict[str, str]) -> list[dict[str, Any]]:
    """The valid loops' columns as one LOOP object each, and an invalid
    loop's three fields in its place (`names`: every loop in file order)."""
    keys = list(columns)
    valid = iter(zip(*columns.values(), strict=True))
    return [{"name": name, "status": "invalid", "error": invalid[name]} if name in invalid
            else dict(zip(keys, next(valid), strict=True)) for name in names]


def _with_reasons(store: Store, columns: dict[str, list[Any]]) -> dict[str, list[Any]]:
    for name, last, check in zip(columns["name"], columns["last_run"], columns["last_check"],
                                 strict=True):
        if last:
            _reason_of_last(store, name, last, check)
    return columns


def list_brief(store: Store) -> list[dict[str, Any]]:
    """What the `ls` table shows, read straight from the definitions and the
    state: `describe` builds the whole JSON shape (eight timestamps turned
    into text), which at 10,000 loops costs more than reading them."""
    from loopctl.commands.listing import brief

    fast = brief(store, last_reason)
    if fast is not None:
        return fast
    defs, state, now = snapshot(store)
    held = held_loops(store, defs, state, now)
    out: list[dict[str, Any]] = []
    for name in defs.names:
        if name in defs.invalid:
            out.append({"name": name, "status": "invalid", "error": defs.invalid[name]})
            continue
        loop, st = defs.loops[name], entries_of(state)[name]
        out.append({
            "name": name, "status": display_status(st), "reason": st.reason,
            "schedule": loop.schedule_text(), "used": st.iterations,
            "limit": loop.max_runs or None,
            "next_fire": st.next_due if st.status == "active" else None,
            "last_outcome": st.last_outcome if st.last_run_id else None,
            "last_reason": last_reason(store, name, st), "last_end": st.last_end,
        })
        shown = held.get(name)
        if shown is not None:  # LAST keeps the run's own reason, else says the fix
            out[-1].update(status="held", reason=shown.kind, until=shown.until,
                           last_reason=out[-1]["last_reason"] or shown.fix)
    return _with_machines(store, out, state["loops"])


def list_queued(store: Store) -> list[dict[str, Any]]:
    """`list_brief`'s rows of the queued loops at least (a queued loop's
    place among them), without reading the others where it can."""
    from loopctl.commands.listing import queued

    fast = queued(store)
    return list_brief(store) if fast is None else fast


def status(store: Store, name: str, for_people: bool = False) -> LoopObject | InvalidLoop:
    """One loop's LOOP object, the shape `ls --json` gives each loop; for
    people also its `limits` and the `fix` of a pause loopctl made."""
    from loopctl.commands.listing import one
    from loopctl.commands.loop_view import InvalidLoop

    fast = one(store, name)
    if fast is not None:  # the loop's own line and entry
        loop, invalid, state, now = fast
        if loop is None:
            return InvalidLoop(name=name, error=invalid[name])
        described = with_reason(store, describe(loop, state["loops"][name], now))
        described = _with_machine(store, name, described)
        return people_extras(loop, state["loops"][name], described) if for_people else described
    defs, state, now = snapshot(store, name)
    if name in defs.invalid:
        return InvalidLoop(name=name, error=defs.invalid[name])
    if name not in defs.loops:
        raise NoSuchLoop(name)
    held = held_loops(store, defs, state, now)
    st = entries_of(state)[name]
    described = with_reason(store, describe(defs.loops[name], st, now, held=held))
    described = _with_machine(store, name, described)
    return people_extras(defs.loops[name], st, described) if for_people else described


def _with_machine(store: Store, name: str, described: LoopObject) -> LoopObject:
    if not team_home(store):
        return described
    from loopctl.commands.team_runs import with_machine

    return with_machine(store, name, described)


def people_extras(loop: LoopDef, st: LoopState, described: LoopObject) -> LoopObject:
    """The loop's `fix` and `limits`, which `status NAME` tells a person."""
    return described.told(fix=fix_of(loop, st, described.status), limits=limits_of(loop))


def fix_of(loop: LoopDef, st: LoopState, shown_status: str) -> str | None:
    """What to do about a pause loopctl made (`fix the cause, then loopctl
    resume NAME`), as a refused `run` says it."""
    from loopctl.domain.valves import pause_explained

    if shown_status != "paused" or st.reason in (None, "user"):
        return None
    refusal = pause_explained(loop, st) or ""
    return refusal.partition("): ")[2] or None


def limits_of(loop: LoopDef) -> dict[str, float | None]:
    """Each bound of a run, by its loops.yaml key (seconds, bytes, counts;
    null: none), from the settings table."""
    from loopctl.domain.loop_settings import LIMITS

    return {s.key: getattr(loop, s.name) for s in LIMITS}


def last_reason(store: Store, name: str, st: LoopState | dict[str, Any]) -> str | None:
    """Why the loop's last run did not end ok, read from its record (only
    for such runs: one small file each). `st`: a record or an entry as
    written (commands/listing reads those)."""
    from loopctl.domain.reason import run_reason
    from loopctl.storage.runs import read_record

    fields = fields_of(st)
    run_id = fields.get("last_run_id")
    if not run_id:
        return None
    if fields.get("last_outcome") in (None, "ok"):
        return failed_check(st)  # from the state: no name check, no file
    if not is_loop_name(name):
        return None
    return run_reason(read_record(store.paths, name, str(run_id)))


def failed_check(st: LoopState | dict[str, Any]) -> str | None:
    """An `ok` run whose check failed (under --until-check, DESIGN §16) is
    "not yet", not a bare `ok`. Read from the state, so no record is opened."""
    fields = fields_of(st)
    check: Any = fields.get("last_check")
    if not check or check.get("passed") or check.get("run_id") != fields.get("last_run_id"):
        return None
    code = check.get("exit_code")
    if code is None and check.get("why"):  # `check cannot start pytst: not found`
        return "not yet: " + str(check["why"])
    return "not yet: check failed" + (f" (exit {code})" if code is not None else "")


def with_reason(store: Store, described: LoopObject) -> LoopObject:
    """`last_run.reason` in the LOOP object: the record's note or the last
    line the agent printed, sanitized (None after an ok run)."""
    if described.last_run:
        _reason_of_last(store, described.name, described.last_run, described.last_check)
    return described


def _reason_of_last(store: Store, name: str, last: dict[str, Any],
                    check: dict[str, Any] | None) -> None:
    """Writes `reason` into `last` (a LOOP object's `last_run`, its own
    mapping: loop_object._runs)."""
    last["reason"] = last_reason(store, name, {
        "last_run_id": last["run_id"], "last_outcome": last["outcome"], "last_check": check})


@record(frozen=True)
class Shown(Result):
    """A loop's definition as loops.yaml holds it (`definition`: its entry,
    unmasked; an invalid entry as written)."""

    name: str
    definition: Any

    def masked(self) -> Any:
        return masked(self.definition)

    def to_json(self, reveal: bool = False) -> dict[str, Any]:
        """Durations in seconds, secrets masked unless `reveal`."""
        return {"version": JSON_VERSION, "name": self.name,
                "definition": definition_json(self.definition, reveal=reveal)}


def show(store: Store, name: str) -> Shown:
    defs = store.read_defs()
    if not defs.has(name):
        raise NoSuchLoop(name)
    return Shown(name=name, definition=defs.raw(name))


DURATION_KEYS = ("every", "after", "min_delay", "max_delay", "keepalive", "timeout", "for")


def definition_json(raw: Any, reveal: bool = False) -> Any:
    """A definition for `--json`: durations in seconds where they parse,
    notification URLs and env values masked (unless `reveal`)."""
    if not isinstance(raw, dict):
        return raw
    out = dict(raw) if reveal else masked(raw)
    if out.get("created_at") is not None:
        try:
            out["created_at"] = iso(parse_iso(str(out["created_at"])))
        except ValueError:
            pass
    for key in DURATION_KEYS:
        value = out.get(key)
        if value is None or value == "auto":
            continue
        try:
            out[key] = parse_duration(value)
        except LoopctlError:
            pass  # an invalid entry is shown as written
    return out


def history(store: Store, name: str, limit: int) -> list[RunRecord]:
    return history_read(store, name, limit)[0]


def history_read(store: Store, name: str, limit: int) -> tuple[list[RunRecord], bool]:
    """`history`, and whether what it shows would have gone further back
    but for the team store's caps (older runs not read)."""
    from loopctl.storage.runs import list_records, loop_folder

    defs = store.read_defs()
    if not defs.has(name) and loop_folder(store.paths, check_name(name)) is None:
        raise NoSuchLoop(name)
    records, cut = list_records(store.paths, name), False
    if team_home(store):  # every machine's (DESIGN §21)
        from loopctl.commands import team_runs

        records, cut = team_runs.merged_read(store, name, records)
    shown = last_runs(records, limit) if limit else records
    return shown, cut and len(shown) == len(records)  # `limit` cut them anyway


@record(frozen=True)
class SkippedSlots(Result):
    """`history NAME --skipped`: due slots that did not run, oldest first."""

    loop: str
    skipped_slots: list[dict[str, Any]]


def skipped_slots_of(store: Store, name: str, limit: int) -> SkippedSlots:
    return SkippedSlots(loop=name, skipped_slots=skipped_slots(store, name, limit))


def skipped_slots(store: Store, name: str, limit: int) -> list[dict[str, Any]]:
    """Due slots of `name` that did not run, oldest first (DESIGN §20): the
    compact records the drivers left, and the fires a gate found no work for
    (their own run records)."""
    from loopctl.domain.skipped import SkippedSlot
    from loopctl.storage.runs import read_skips

    records = history(store, name, 0)
    gated = [SkippedSlot(r.slot, "gate_no_work", r.ended_at or r.started_at, run_id=r.run_id)
             for r in records if r.outcome == "skipped"]
    entries = sorted(read_skips(store.paths, name) + gated + _team_skips(store, name),
                     key=lambda e: str(e.at))
    return [e.to_json() for e in (entries[-limit:] if limit else entries)]


def _team_skips(store: Store, name: str) -> list[SkippedSlot]:
    """The other machines' skipped slots, in a home with a store (this
    machine's are in its own file, whether sent yet or not)."""
    if not team_home(store):
        return []
    from loopctl.commands import team_runs
    from loopctl.storage.pg.dsn import machine

    here = machine()
    return [e for e in team_runs.skips(store, name) if e.machine != here]


def last_runs(records: list[RunRecord], limit: int) -> list[RunRecord]:
    """The last `limit` fires that were not skipped by a gate, with the
    skipped ones among and after them: a loop gated every minute does not
    push its real runs out of `history` (DESIGN §17)."""
    real = 0
    for at in range(len(records) - 1, -1, -1):
        if records[at].outcome != "skipped":
            real += 1
            if real == limit:
                return records[at:]
    return records


@record(frozen=True)
class GateSkips(Result):
    """How many fires a gate skipped, the last one, and what its gate said."""

    VERSIONED = False

    count: int
    last_run_id: str
    last_gate_output: str | None


@record(frozen=True)
class History(Result):
    """`history NAME`: the loop's run records, oldest first, and the fires
    its gate skipped among them."""

    loop: str
    runs: list[RunRecord]
    skipped: GateSkips | None
    truncated: bool = False  # the team store's caps left older runs unread

    def to_json(self) -> dict[str, Any]:
        shape = {**Result.to_json(self), "runs": [r.to_json() for r in self.runs],
                 "skipped": self.skipped and self.skipped.to_json()}
        if not self.truncated:  # in the JSON only when true
            del shape["truncated"]
        return shape


def runs_of(store: Store, name: str, limit: int) -> History:
    """`history NAME [--limit N]`: `history`, with what the gate skipped."""
    records, cut = history_read(store, name, limit)
    return History(loop=name, runs=records, skipped=skipped_summary(records), truncated=cut)


def skipped_summary(records: list[RunRecord]) -> GateSkips | None:
    """How many fires a gate skipped, and what it said the last time."""
    skipped = [r for r in records if r.outcome == "skipped"]
    if not skipped:
        return None
    last = skipped[-1]
    return GateSkips(count=len(skipped), last_run_id=last.run_id,
                     last_gate_output=last.gate.output_tail if last.gate else None)


def read_events(store: Store, loop: str | None = None) -> list[dict[str, Any]]:
    import json

    out = []
    try:
        with open(store.paths.events_file, "rb") as handle:
            for line in handle:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if loop is None or event.get("loop") == loop:
                    out.append(event)
    except FileNotFoundError:
        pass
    return out
