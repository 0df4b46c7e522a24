"""`logs NAME` for a run another machine ran (DESIGN §21): the tail the
team store holds (the log's last 64 KiB), and where the whole log is.

The tail is untrusted: any machine with the store's password wrote it. It
is printed as text, each line through the one sanitizer (no escape
sequence, control character or bidi override reaches the terminal), unlike
this machine's own log, which `logs` copies as the agent wrote it."""

from __future__ import annotations

import sys

from loopctl.storage.store import Store

TYPE_CHECKING = False

if TYPE_CHECKING:
    from loopctl.commands.team_runs import TeamLog


def team_log(s: Store, name: str, run_id: str | None, follow: bool = False) -> bool:
    """Print run `run_id` of `name` (None: the team's newest, when another
    machine ran it) from the store; False when the store has no such run
    from another machine (or the home has no store): `logs` goes on. With
    `follow`, the run has ended: its exit code is given, as `logs -f` does."""
    from loopctl.storage.pg.gate import home_has_store as team_home

    if not team_home(s):
        return False
    if run_id is None:
        run_id = _newest_elsewhere(s, name)
        if run_id is None:
            return False
    from loopctl.commands import team_runs

    found = team_runs.log_of(s, name, run_id)
    if found is None:
        return False
    sys.stdout.write(shown(name, found))
    sys.stdout.flush()
    if follow:
        import typer

        from loopctl.engine.supervisor import exit_code_for

        raise typer.Exit(exit_code_for(found.record))
    return True


def _newest_elsewhere(s: Store, name: str) -> str | None:
    """The team's newest run of `name` if another machine ran it."""
    from loopctl.commands import team_runs
    from loopctl.storage.pg.dsn import machine
    from loopctl.storage.runs import latest_run_id, read_record

    mine = latest_run_id(s.paths, name)
    local = read_record(s.paths, name, mine) if mine else None
    runs = team_runs.merged(s, name, [local] if local else [], rows=5)
    if not runs or runs[-1].machine in (None, machine()):
        return None
    return str(runs[-1].run_id)


def shown(name: str, found: TeamLog) -> str:
    """The header line, the tail as sanitized lines, and where the rest is."""
    from loopctl.domain.untrusted import block, line

    record = found.record
    said = f"# loopctl: run {found.run_id} of {name}"
    if isinstance(record.iteration, int):
        said += f" (iteration {record.iteration})"
    if record.started_at:
        said += f", started {line(record.started_at)}"
    said += f", ended {record.outcome} (exit code {record.exit_code})"
    where = (f"machine {line(found.machine)}, "
             f"{line(found.path or '(path not recorded)')}")
    cut = found.cut
    said += (f": ran on {where}; the last 64 KiB of its log follow, from the team store"
             if cut else f": ran on {where}; its log follows, from the team store")
    text = found.tail.decode("utf-8", "replace")
    if cut:  # the first line was cut by the 64 KiB bound: say so rather than show half
        text = "[...]" + text
    body = block(text)
    end = "" if not body or body.endswith("\n") else "\n"
    footer = f"# loopctl: the whole log is on machine {where}\n"
    return said + "\n" + body + end + footer
