"""Console entry point.

`loopctl tick` runs from cron every minute, usually with nothing due, so it
must cost little more than starting the interpreter. This module therefore
imports only the standard library until it knows there is work: it reads the
summary that every state write keeps (`wake_at`, `busy`, and the signature of
the `loops.yaml` the state was reconciled with) and exits when nothing is
due. Anything else goes to the Typer app.
"""

from __future__ import annotations

import sys

from loopctl.cli.flags import FAST_TICK_FLAGS

TYPE_CHECKING = False  # not `typing`: ~4 ms of every cron tick

if TYPE_CHECKING:
    from typing import NoReturn


def nothing_due() -> bool:
    """True only when state proves no loop needs a driver right now."""
    import os

    from loopctl import clock
    from loopctl.storage import paths

    config_dir, state_dir = paths.roots()
    loops_file = os.path.join(config_dir, "loops.yaml")
    if paths.owes_team(state_dir):
        return False  # the full path's pass sends what the team store has not taken
    # A tick fires an `--every` of whole minutes up to 15 s early
    # (schedule.tick_early): what is due that soon takes the full path.
    horizon = clock.now() + 15.0
    if os.environ.get("LOOPCTL_STORE", "").strip():
        return team_nothing_due(loops_file, horizon)
    state_file = os.path.join(state_dir, "state.json")
    if files_nothing_due(loops_file, state_file, horizon):
        return True
    if os.path.lexists(state_file):
        return False  # a home of files with something due: no store to ask
    # A store home keeps no state.json: its state (and the team's next
    # wake) is in the store, which only the word `store` in loops.yaml sets.
    from loopctl.storage.pg.gate import may_have_store

    return may_have_store(loops_file) and team_nothing_due(loops_file, horizon)


def team_nothing_due(loops_file: str, horizon: float) -> bool:
    """The store's `team_wake` row proves nothing due (storage/pg/idle.py)."""
    try:
        from loopctl.storage.pg.idle import nothing_due as store_nothing_due

        return store_nothing_due(loops_file, horizon)
    except Exception:  # unreachable, no schema, anything odd: the full path says it
        return False


def files_nothing_due(loops_file: str, state_file: str, horizon: float) -> bool:
    """summary.json (or state.json) proves no loop due before `horizon`."""
    import os

    from loopctl.storage import paths

    try:
        summary_file = os.path.join(os.path.dirname(state_file), "summary.json")
        summary = paths.current_summary(summary_file, state_file)
        if summary is None:  # none, or older than state.json: read the state itself
            data = paths.read_bounded(state_file, 1 << 30)
            if data is None:  # missing, or not a regular file: the full path says which
                return not os.path.exists(loops_file) and not os.path.lexists(state_file)
            import json  # only here: it imports `re` (see fast/flatjson)

            summary = json.loads(data)
        quiet = paths.quiet_until(summary, paths.file_signature(loops_file), horizon)
        return quiet is not None and not quiet[1]  # a run in flight: is it still alive?
    except FileNotFoundError:
        return not os.path.exists(loops_file)  # a fresh home: no loops at all
    except Exception:  # anything odd: the full path decides and reports
        return False


def lease_present() -> bool:
    """A plain `tick` (a person typing it; cron's line has --quiet) while a
    driver holds the lease takes the full path, which says who holds it."""
    import os

    from loopctl.storage import paths

    _, state_dir = paths.roots()
    return os.path.lexists(os.path.join(state_dir, "lease.json"))


def print_names(key: str = "loops") -> None:
    """Loop names (or with `notify_targets`, notification target names) for
    shell completion: one per line, nothing on any error."""
    import os

    from loopctl.storage import paths

    config_dir, _ = paths.roots()
    try:
        import yaml

        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        with open(os.path.join(config_dir, "loops.yaml"), "rb") as handle:
            doc = yaml.load(handle, Loader=loader)  # a safe loader
        names = doc.get(key) or {}
        print("\n".join(str(name) for name in names))
    except Exception:  # completion must never print an error
        pass


def main(program: bool = False) -> None:
    """`program`: called by the `loopctl` script itself (loopctl/__main__.py),
    which ends with this call, so the process may end without the
    interpreter's teardown (`_leave`). Any other caller (the tests'
    in-process harness, a script going on after `main`) gets SystemExit."""
    from loopctl.collector import short_lived

    short_lived()  # the collector off: loopctl/collector.py says why
    global _PROGRAM
    _PROGRAM = program
    _main(sys.argv[1:])


_PROGRAM = False


def _leave(code: int) -> NoReturn:
    """`sys.exit(code)`; for the program itself, the same end without the
    interpreter's teardown: freeing every module's objects is ~5M
    instructions, and after `tick` forked a supervisor each page it writes
    faults again (~1,200 page faults, a tenth of the tick's). What the
    teardown does that matters is done first: the atexit handlers, stdout
    and stderr flushed. With another thread still running (its end is
    waited for) or output that cannot be flushed (the interpreter reports
    it), the usual exit."""
    threading = sys.modules.get("threading")
    if _PROGRAM and (threading is None or threading.active_count() == 1):
        import atexit
        import os

        atexit._run_exitfuncs()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:  # the usual exit says what went wrong
            sys.exit(code)
        os._exit(code)
    sys.exit(code)


def _check_store(args: list[str]) -> None:
    """A home with a team store acts only once the store answers with the
    schema this code knows (DESIGN §21): else one line, exit 3."""
    from loopctl.storage.pg.gate import gate

    try:
        gate(args)
    except Exception as exc:
        from loopctl.cli.failure import report, wants_json

        sys.exit(report(exc, wants_json(args)))


def _main(args: list[str]) -> None:
    try:
        from loopctl.settings import check_env

        check_env()
    except Exception as exc:  # a bad LOOPCTL_* number: one line, exit 2
        from loopctl.cli.failure import report, wants_json

        sys.exit(report(exc, wants_json(args)))
    if args[:1] == ["tick"]:
        from loopctl.storage.paths import note_tick

        note_tick()
    if args[:1] == ["tick"] and set(args[1:]) <= FAST_TICK_FLAGS and nothing_due() \
            and (args[1:] or not lease_present()):
        _leave(0)
    if args in (["__names"], ["__targets"]):
        print_names("loops" if args == ["__names"] else "notify_targets")
        sys.exit(0)
    _check_store(args)
    from loopctl.cli.direct import dispatch

    code = dispatch(args)
    if code is not None:
        _leave(code)
    from loopctl.cli.app import run_app

    run_app(args)
