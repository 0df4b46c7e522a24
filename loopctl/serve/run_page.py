"""One run as one HTML file: `GET /loops/NAME/runs/RUN_ID` (`?download=1`
saves it). Its style is inline and it loads nothing, so the saved file
reads the same offline, mailed or attached to an issue. Only runs loopctl
recorded are shown (the run index), never a file planted in the folder."""

from __future__ import annotations

from importlib import resources

from loopctl.domain.durations import format_duration, format_usd
from loopctl.domain.errors import LoopctlError
from loopctl.domain.reason import run_reason
from loopctl.domain.run_record import RunRecord
from loopctl.serve.pages import esc, href
from loopctl.storage.store import Store

LOG_LIMIT = 1 << 20  # the last MiB of the log


def _facts(record: RunRecord) -> str:
    duration = record.duration_s
    check = record.check
    rows = [("outcome", record.outcome), ("reason", run_reason(record)),
            ("trigger", record.trigger), ("started (UTC)", record.started_at),
            ("ended (UTC)", record.ended_at),
            ("took", format_duration(int(duration)) if duration is not None else None),
            ("exit code", record.exit_code),
            ("cost", format_usd(record.cost_usd) if record.cost_usd is not None
             else None),
            ("check", ("passed" if check.passed else "failed") if check else None),
            ("metric", check.metric if check else None),
            ("decision", (record.decision or {}).get("decision")),
            ("summary", (record.decision or {}).get("summary")),
            ("note", record.note), ("machine", record.machine)]
    return "<dl>" + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in rows
                            if v is not None and v != "") + "</dl>"


def run_page(store: Store, name: str, run_id: str) -> bytes:
    from loopctl.domain.untrusted import check_run_id
    from loopctl.storage.paths import read_tail
    from loopctl.storage.runs import is_known, read_record

    try:
        check_run_id(run_id)
    except LoopctlError:
        raise LoopctlError(f"no run {run_id[:40]!r} of {name!r}", 4) from None
    record = read_record(store.paths, name, run_id) if is_known(store.paths, name, run_id) \
        else None
    if record is None:
        return _team_run_page(store, name, run_id)
    data, cut = read_tail(store.paths.run_log(name, run_id), LOG_LIMIT) or (b"", False)
    return _page(name, run_id, record, " (the last MiB)" if cut else "",
                 data.decode("utf-8", "replace"))


def _team_run_page(store: Store, name: str, run_id: str) -> bytes:
    """Another machine's run (DESIGN §21): its record and log tail from the
    team store, checked as untrusted (commands/team_runs), and where the
    whole log is."""
    from loopctl.storage.pg.gate import home_has_store as team_home

    found = None
    if team_home(store):
        from loopctl.commands.team_runs import log_of

        found = log_of(store, name, run_id)
    if found is None:
        raise LoopctlError(f"no run {run_id!r} of {name!r} (see its history)", 4)
    said = (f" ({'the last 64 KiB, ' if found.cut else ''}from the team store; the whole log "
            f"is on machine {found.machine}, {found.path or 'path not recorded'})")
    return _page(name, run_id, found.record, said, found.tail.decode("utf-8", "replace"))


def _page(name: str, run_id: str, record: RunRecord, said: str, text: str) -> bytes:
    style = resources.files("loopctl.serve").joinpath("static").joinpath("app.css").read_text()
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f"<title>{esc(name)} {esc(run_id)} · loopctl</title><style>{style}</style>"
            f'</head><body><main><h1><a href="{esc(href(name))}">{esc(name)}</a> '
            f"run {esc(run_id)}</h1>{_facts(record)}<h2>Log{esc(said)}"
            f'</h2><pre class="log">{esc(text)}</pre>'
            "</main></body></html>").encode()
