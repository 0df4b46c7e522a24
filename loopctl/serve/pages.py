"""The pages, rendered by the server and usable without JavaScript: the
overview, a loop's page, doctor's findings. Every string that came from a
user, a loops.yaml or an agent (names, prompts, reasons, notes, logs) goes
through `esc` on its way into the markup; the loop's name in a URL is
percent-encoded as well."""

from __future__ import annotations

from html import escape
from importlib import resources
from typing import Any
from urllib.parse import quote

from loopctl import clock
from loopctl.commands import views as reading
from loopctl.domain.durations import format_duration, format_rough, format_usd
from loopctl.domain.run_record import RunRecord
from loopctl.domain.timestamps import iso
from loopctl.serve import api, charts
from loopctl.serve.server import Response
from loopctl.storage.store import Store

LOG_TAIL = 64 * 1024
STATIC = {"app.css": "text/css; charset=utf-8", "app.js": "text/javascript; charset=utf-8"}
HISTORY_ROWS = 100


def esc(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def href(name: str) -> str:
    return "/loops/" + quote(name, safe="")


def version_now(store: Store) -> str:
    """Taken before a page reads anything: a write after it shows as news."""
    from loopctl.serve.live import home_signature

    return home_signature(store.paths)


def layout(title: str, body: str, app: Any, live: bool = True, page: str = "/",
           version: str = "") -> bytes:
    store = Store()
    note = app.drivers.missing(store)
    banner = f'<p class="banner warn" id="driver">{esc(note)}</p>' if note else ""
    script = '<script src="/static/app.js" defer></script>' if live else ""
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)} · loopctl</title>"
            f'<link rel="stylesheet" href="/static/app.css">{script}</head><body>'
            f'<header><a href="/" class="home">loopctl</a> <a href="/doctor">doctor</a>'
            f'</header>{banner}<main id="main" data-page="{esc(page)}" '
            f'data-version="{esc(version)}">{body}</main>'
            "</body></html>").encode()


def static(name: str) -> Response:
    if name not in STATIC:
        return Response(404, b"no such file\n", "text/plain; charset=utf-8")
    data = resources.files("loopctl.serve").joinpath("static").joinpath(name).read_bytes()
    return Response(200, data, STATIC[name])


def _when(text: str | None, now: float) -> str:
    if not text:
        return "-"
    from loopctl.domain.timestamps import parse_iso

    delta = parse_iso(text) - now
    said = format_rough(int(abs(delta)))
    return f'<time datetime="{esc(text)}">{"in " + said if delta >= 0 else said + " ago"}</time>'


def status_cell(loop: dict[str, Any]) -> str:
    status = str(loop.get("status"))
    reason = loop.get("reason") or loop.get("error")
    note = str(loop.get("note") or "")
    if reason == "no_progress" and note.startswith("no_progress: "):
        reason = note  # why, kept in the state (`no_progress: 3 identical results in a row`)
    return (f'<span class="status s-{esc(status.split()[0])}">{esc(status)}</span>'
            + (f' <span class="reason">({esc(reason)})</span>' if reason else ""))


def _last_cell(loop: dict[str, Any]) -> str:
    last = loop.get("last_run")
    if not last:
        return "-"
    reason = last.get("reason")
    return (f'<span class="outcome o-{esc(last.get("outcome"))}">{esc(last.get("outcome"))}'
            "</span>" + (f'<div class="reason">{esc(reason)}</div>' if reason else ""))


def _limits(loop: dict[str, Any]) -> tuple[str, str]:
    runs = loop.get("runs") or {}
    cost = loop.get("cost_usd") or {}
    used = f"{runs.get('used', 0)}/{runs.get('limit') or '∞'}"
    spent = format_usd(cost.get("spent") or 0.0) + (
        f" of {format_usd(cost['budget'])}" if cost.get("budget") is not None else "")
    return used, spent


def overview(store: Store, app: Any) -> bytes:
    from loopctl.serve import overview as page

    return page.overview(store, app)


def _holds(store: Store, now: float) -> str:
    from loopctl.domain.accounts import clean_table, holding

    table = clean_table(store.read_state().get("accounts"))
    held = [entry for entry in table.values() if holding(entry, now)]
    if not held:
        return ""
    items = "".join(
        f"<li>the {esc(e.preset)} account is {esc(e.kind)}"
        + (f" until {esc(iso(e.until))}" if e.until else "")
        + f": {esc(', '.join(e.loops))}" + (f" — {esc(e.fix)}" if e.fix else "")
        + "</li>" for e in held)
    return f'<section class="holds"><h2>Account holds</h2><ul>{items}</ul></section>'


def _actions(name: str, csrf: str, status: str) -> str:
    token = f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
    target = esc(href(name))

    def button(verb: str, label: str, extra: str = "") -> str:
        return (f'<form method="post" action="{target}/{verb}" class="action">{token}{extra}'
                f'<button type="submit" name="do" value="{verb}" id="do-{verb}">{label}'
                "</button></form>")

    trigger = (f'<form method="post" action="{target}/trigger" class="action trigger">{token}'
               '<textarea name="payload" rows="2" cols="40" maxlength="65536" '
               'placeholder="payload for the run (optional, at most 64 KiB)"></textarea>'
               '<button type="submit" id="do-trigger">trigger</button></form>')
    kill = button("stop", "stop and kill the run", '<input type="hidden" name="kill" value="1">'
                  ).replace('id="do-stop"', 'id="do-kill"') if status == "running" else ""
    return ('<div class="actions">' + button("pause", "pause") + button("resume", "resume")
            + button("run", "run now") + button("stop", "stop") + kill + trigger + "</div>")


def _question(name: str, info: dict[str, Any], csrf: str) -> str:
    """A loop its agent blocked: the agent's question and a field to answer
    it (`loopctl resume NAME --answer TEXT`)."""
    if info.get("status") != "paused" or info.get("reason") != "blocked":
        return ""
    said = info.get("last_decision") or {}
    return (f'<section class="question" id="question"><h2>The agent asks</h2>'
            f'<blockquote><p id="asked">{esc(said.get("summary") or "(no question given)")}</p>'
            + (f'<footer>{esc(said["evidence"])}</footer>' if said.get("evidence") else "")
            + f'</blockquote><form method="post" action="{esc(href(name))}/resume">'
            f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
            '<label for="answer">Your answer (its next run reads it, as data)</label>'
            '<textarea id="answer" name="answer" rows="4" maxlength="65536" required>'
            '</textarea><button type="submit" id="do-answer">answer and resume</button>'
            "</form></section>")


def _history(name: str, records: list[RunRecord]) -> str:
    from loopctl.domain.reason import run_reason

    rows = []
    machines = any(r.machine for r in records)  # a team store's (DESIGN §21)
    for r in reversed(records[-HISTORY_ROWS:]):
        duration = r.duration_s
        check = r.check
        rows.append(
            f'<tr><td><a href="{esc(href(name))}/runs/{esc(r.run_id)}">{esc(r.run_id)}'
            f"</a></td><td>{esc(r.started_at)}</td>"
            f"<td>{esc(format_duration(int(duration)) if duration is not None else '-')}</td>"
            f'<td class="o-{esc(r.outcome)}">{esc(r.outcome)}</td>'
            f"<td>{esc(r.exit_code)}</td>"
            f"<td>{esc(format_usd(r.cost_usd) if r.cost_usd is not None else '')}</td>"
            f"<td>{esc('' if not check else 'pass' if check.passed else 'fail')}"
            f"{esc(' ' + format(check.metric, 'g') if check and check.metric is not None else '')}"
            f"</td><td>{esc((r.decision or {}).get('decision'))}</td>"
            f'<td class="reason">{esc(run_reason(r) or r.note)}</td>'
            + (f"<td>{esc(r.machine)}</td>" if machines else "") + "</tr>")
    if not rows:
        return '<p class="none">no finished runs yet</p>'
    return ('<table class="history"><thead><tr><th>run</th><th>started (UTC)</th><th>took</th>'
            "<th>outcome</th><th>exit</th><th>cost</th><th>check</th><th>decision</th>"
            f"<th>reason</th>{'<th>machine</th>' if machines else ''}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def _log_tail(store: Store, name: str, info: dict[str, Any]) -> str:
    current = info.get("current_run")
    if not current:
        return ""
    from loopctl.storage.paths import read_tail

    path = store.paths.run_log(name, current["run_id"])
    data, _ = read_tail(path, LOG_TAIL) or (b"", False)
    text = data.decode("utf-8", "replace")
    return (f'<section><h2>Run in flight: {esc(current["run_id"])}</h2>'
            f'<pre class="log">{esc(text)}</pre></section>')


def _notes(store: Store, name: str) -> str:
    from loopctl.commands.notes import notes

    kept = notes(store, name)
    if not kept.enabled and not kept.notes:
        return ""
    return f'<section><h2>Notes</h2><pre class="notes">{esc(kept.notes)}</pre></section>'


def _cut_note(records: list[RunRecord], cut: bool) -> str:
    """What the team store's caps left unread, said above the history."""
    return (f'<p class="note" id="truncated">showing the newest {len(records)} runs; older '
            "runs were not read from the team store</p>") if cut else ""


def loop_page(store: Store, app: Any, name: str, query: str, said: str | None = None,
              failed: bool = False) -> bytes:
    version = version_now(store)
    info = api.loop(store, name)
    if info.get("status") == "invalid":
        return layout(name, f"<h1>{esc(name)}</h1><p>{status_cell(info)}</p>", app)
    records, cut = reading.history_read(store, name, 0)
    flash = (f'<p class="banner {"error" if failed else "ok"}" id="said">{esc(said)}</p>'
             if said else "")
    used, spent = _limits(info)
    now = clock.now()
    fix = reading.status(store, name, for_people=True).fix
    facts = (f"<dl><dt>status</dt><dd id=\"status\">{status_cell(info)}"
             + (f'<div class="reason">{esc(fix)}</div>' if fix else "") + "</dd>"
             f"<dt>schedule</dt><dd>{esc(info['schedule']['text'])}</dd>"
             f"<dt>next fire</dt><dd>{_when(info.get('next_fire'), now)}</dd>"
             f"<dt>last run</dt><dd>{_last_cell(info)}</dd>"
             f"<dt>runs</dt><dd>{esc(used)}</dd><dt>spent</dt><dd>{esc(spent)}</dd>"
             + (f"<dt>note</dt><dd>{esc(info['note'])}</dd>" if info.get("note") else "")
             + "</dl>")
    prompt = reading.show(store, name).definition
    shown = (prompt.get("prompt") or prompt.get("prompt_file")) if isinstance(prompt, dict) \
        else ""
    body = (f'<h1>{esc(name)}</h1>{flash}{facts}'
            f'<details><summary>prompt</summary><pre class="prompt">{esc(shown)}</pre></details>'
            + _question(name, info, app.page_csrf())
            + _actions(name, app.page_csrf(), str(info.get("status")))
            + '<section class="charts">' + "".join(charts.all_charts(records)) + "</section>"
            + _log_tail(store, name, info) + _notes(store, name)
            + f"<section><h2>History</h2>{_cut_note(records, cut)}{_history(name, records)}"
            "</section>")
    return layout(name, body, app, page=href(name), version=version)


def trigger_said(result: dict[str, Any]) -> str:
    """What `loopctl trigger` prints, for the page."""
    count = result.get("triggers", 1)
    coalesced = f" ({count} triggers coalesce into this fire)" if count > 1 else ""
    name = result.get("loop")
    if result.get("run_in_flight"):
        return f"triggered {name}: it fires when run {result['run_in_flight']} ends{coalesced}"
    return f"triggered {name}: it fires at the next driver pass{coalesced}"


def doctor(store: Store, app: Any) -> bytes:
    from loopctl.commands.doctor import doctor as check

    found = check(store)
    items = "".join(f'<li class="f-{esc(f["level"])}"><b>{esc(f["level"])}</b> '
                    f'{esc(f["check"])}: {esc(f["message"])}</li>' for f in found.findings)
    said = "healthy" if found.healthy else "problems found"
    return layout("doctor", f"<h1>doctor: {said}</h1><ul class=\"findings\">{items}</ul>",
                  app, live=False)


def error_page(status: int, message: str) -> bytes:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{status}'
            f'</title><link rel="stylesheet" href="/static/app.css"></head><body><main>'
            f'<h1>{status}</h1><p class="banner error">{esc(message)}</p>'
            '<p><a href="/">back to the loops</a></p></main></body></html>').encode()


def login_page() -> bytes:
    return error_page(401, "open the URL that `loopctl serve` printed (it carries the token "
                      "once, then a cookie does)")
