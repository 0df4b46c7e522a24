"""Telling a human through Apprise (DESIGN §13): one notification per
attention event and target, delivered by a detached process so a slow or
dead service never delays a run, never fails it and never changes the loop.

Notification URLs carry tokens (`slack://T0/B0/secret`): they are stored only
in `loops.yaml` (0600) and in the claimed run, and shown everywhere else as
`slack://****`; an error text is scrubbed of every piece of its URL (an ntfy
topic is the secret, and Apprise quotes it). Apprise itself is imported only
by the sending process (and the URL check of the commands that send): the
`tick` and `ls` paths never load it.

Bounded for real (DESIGN §15): Apprise's requests can be kept alive for
hours by an endpoint that answers a byte a second, and its threads ignore an
alarm, so the sending is a process of its own, in a session of its own,
SIGKILLed at the timeout. Detached deliveries take one of a few slots (file
locks under the state folder) first; a few more wait their turn, the rest
are dropped with a note (the run's log, `status`, `doctor`).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from loopctl.domain.errors import UsageError
from loopctl.domain.untrusted import mask, where
from loopctl.fast.lazy_re import lazy

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

SLOTS = 4  # deliveries sending at once (LOOPCTL_NOTIFY_SLOTS)
WAITING_PER_SLOT = 4  # deliveries that may wait for each slot; beyond: dropped
RESULTS_BOUND = 4096  # bytes of the sender's answer read per target (its line is ~400)
_URL = lazy(r"\b([A-Za-z][A-Za-z0-9+.-]{0,31})://[^\s'\"<>]+")
# requests' own wording for the path it asked for ("with url: /hook/SECRET").
_URL_PATH = lazy(r"(\burl:\s*)/\S*")


def mask_text(text: str) -> str:
    """Every URL inside `text` masked (Apprise's log lines quote them)."""
    return _URL.sub(lambda m: f"{m.group(1)}://****", text)


def secrets_of(url: str) -> list[str]:
    """Every piece of `url` that may be a secret: user, password, host (an
    ntfy topic or a Slack team can sit there), each path segment, each query
    value; as written and percent-decoded, longest first. Shorter than 3
    characters is no secret worth replacing every `a` of a message for."""
    from urllib.parse import parse_qsl, unquote, urlsplit

    _, _, rest = url.partition("://")
    try:
        parts = urlsplit("x://" + rest)
        pieces = [parts.username, parts.password, parts.hostname, parts.netloc, parts.path,
                  parts.query, parts.fragment, *parts.path.split("/"),
                  *(v for _, v in parse_qsl(parts.query))]
    except ValueError:  # an odd port or bracket: fall back to plain splitting
        pieces = [rest, *re.split(r"[/@:?&=#]", rest)]
    found = {p for piece in pieces if piece for p in (piece, unquote(piece))}
    return sorted((p for p in found if len(p) >= 3), key=len, reverse=True)


def scrub(text: str, urls: Iterable[str]) -> str:
    """`text` safe to show: one line, every URL masked, no piece of the
    targets' URLs left (`status`, `--json`, `doctor` and the log show it)."""
    from loopctl.domain.untrusted import line

    shown = line(text)
    for url in urls:
        for piece in secrets_of(url):
            shown = shown.replace(piece, "****")
    return _URL_PATH.sub(r"\1/****", mask_text(shown))


def check_urls(urls: Iterable[str]) -> list[str]:
    """Apprise's own parser on each URL; the first it cannot use is an error
    (exit 2) that names it, masked."""
    import apprise

    from loopctl.integrations.apprise_plugins import load_for

    urls = [url for url in urls if url != "none"]
    load_for(urls)
    checked = []
    for url in urls:
        if not apprise.Apprise().add(url):
            raise UsageError(f"bad --notify {where(url)}: Apprise does not understand this URL; "
                             "expected one like slack://..., ntfy://topic, mailto://..., "
                             "json://host:port/path (see Apprise's service list)")
        checked.append(url)
    return checked


def resolve(values: Iterable[str], named: object) -> list[str]:
    """`--notify` values as URLs: a URL as given, a name as the URLs top-level
    `notify_targets:` gives it (so cron lines carry no token)."""
    urls: list[str] = []
    table = named if isinstance(named, dict) else {}
    for value in values:
        if "://" in value:
            urls.append(value)
        elif value in table:
            found = table[value]
            urls += [found] if isinstance(found, str) else list(found)
        else:
            known = ", ".join(sorted(table)) or "none defined"
            raise UsageError(f"unknown notification target {value[:64]!r}: expected an Apprise "
                             f"URL or a name from notify_targets: in loops.yaml ({known})")
    return list(dict.fromkeys(urls))


def message(event: dict[str, Any]) -> tuple[str, str]:
    """Title and body of the notification for an attention event: each
    field one sanitized line (a chat client renders what a terminal would)."""
    from loopctl.domain.untrusted import line

    reason = f" ({event['reason']})" if event.get("reason") else ""
    title = line(f"loopctl: {event.get('loop')} {event.get('status')}{reason}")
    evidence = event.get("evidence") or {}
    lines = [str(event.get("summary") or "")]
    if isinstance(evidence, dict) and evidence.get("text"):
        lines.append(f"Evidence ({evidence.get('source', 'loopctl')}): {evidence['text']}")
    facts = [("Run", event.get("run_id")), ("Iteration", _of(event)),
             ("Cost", _cost(event.get("cost_usd"))), ("Branch", event.get("branch")),
             ("Pull request", event.get("pr")), ("Log", event.get("log"))]
    lines += [f"{label}: {value}" for label, value in facts if value]
    return title, "\n".join(line(text) for text in lines if text)[:4000]


# Apprise's notification types: a run that failed (or the failures that
# paused a loop) is a `failure`; a stop a person should look at, a `warning`;
# a finished loop, `success`. Tests and digests are `info`.
FAILURES = ("failure_limit", "handoff_failed", "error")


def kind_of(event: dict[str, Any]) -> str:
    """The Apprise type (`info`, `success`, `warning`, `failure`) of an event."""
    status, reason = event.get("status"), event.get("reason")
    if status == "failed" or reason in FAILURES:
        return "failure"
    return "success" if status == "completed" else "warning"


def _of(event: dict[str, Any]) -> str | None:
    if event.get("iteration") is None:
        return None
    limit = event.get("max_runs")
    return f"{event['iteration']}/{limit}" if limit else str(event["iteration"])


def _cost(value: object) -> str | None:
    return f"${value:.4f}" if isinstance(value, (int, float)) and value else None


# -- sending ------------------------------------------------------------------------


def timeout() -> float:
    from loopctl.settings import knob

    return knob("LOOPCTL_NOTIFY_TIMEOUT")


def send(targets: Iterable[str], title: str, body: str,
         results: list[dict[str, Any]] | None = None, kind: str = "info") -> list[dict[str, Any]]:
    """Send to each target on its own, in this process and unbounded (the
    sending process runs it); one scrubbed result per target, appended to
    `results` as each one is known."""
    import logging

    import apprise

    from loopctl.integrations.apprise_plugins import load_for

    results = [] if results is None else results
    targets = list(targets)
    load_for(targets)
    for url in targets:
        hub = apprise.Apprise()
        with apprise.LogCapture(level=logging.WARNING, fmt="%(message)s") as log:
            ok = bool(hub.add(url)) and bool(hub.notify(title=title, body=body,
                                                         notify_type=kind))
            detail = log.getvalue().strip().splitlines() if not ok else []
        error = None if ok else scrub(detail[-1] if detail else "not delivered", [url])[:300]
        results.append({"target": where(url), "ok": ok, "error": error})
    return results


def send_bounded(targets: list[str], title: str, body: str, folder: str,
                 limit: float | None = None, kind: str = "info") -> list[dict[str, Any]]:
    """`send` in a process of its own, killed with everything it started at
    `limit` seconds (default: the timeout) whatever Apprise is doing. The
    job travels on its stdin (never argv, where `ps` shows it); one JSON
    line of result per target comes back on its stdout."""
    import os

    from loopctl.integrations import subprocess_runner as runner

    limit = timeout() if limit is None else limit
    job = json.dumps({"targets": targets, "title": title, "body": body,
                      "type": kind}).encode()
    # cwd: `-m` puts the working directory first on sys.path, and the
    # driver's may hold anyone's `apprise.py`; the state dir is ours.
    # The job goes in and the results come out under the same deadline.
    ran = runner.run([sys.executable, "-m", "loopctl.integrations.notify", "--send"],
                     env=os.environ, timeout=limit, cwd=folder, stdin=job,
                     out_limit=RESULTS_BOUND * max(len(targets), 1), stderr="null")
    why = None
    if ran.timed_out:
        why = f"timed out after {limit:g}s"
    elif ran.returncode:
        why = f"delivery process exited {ran.returncode}"
    return _results(ran.out, targets, why or "not delivered")


def _results(out: bytes, targets: list[str], why: str) -> list[dict[str, Any]]:
    """The sender's lines, trusted no further than their shape, one per
    target; the targets it did not get to carry `why`."""
    results: list[dict[str, Any]] = []
    for raw, url in zip(out.splitlines(), targets, strict=False):
        try:
            got = json.loads(raw)
            ok = got["ok"] is True
            error = None if ok else scrub(str(got.get("error") or why), targets)[:300]
        except (ValueError, TypeError, KeyError):
            break
        results.append({"target": where(url), "ok": ok, "error": error})
    results += [{"target": where(u), "ok": False, "error": why} for u in targets[len(results):]]
    return results


def deliver_detached(event: dict[str, Any], targets: list[str], folder: str) -> str | None:
    """Start a delivery process for one event (the one detached delivery);
    the error if it cannot start. Event and URLs travel on its stdin, never
    in argv, where `ps` shows them to every user."""
    from loopctl.integrations.subprocess_runner import detach

    why = detach([sys.executable, "-m", "loopctl.integrations.notify"],
                 json.dumps({"event": event, "targets": targets}).encode(), folder)
    return f"notification delivery could not start: {why}" if why else None


def summary(results: list[dict[str, Any]]) -> str | None:
    """One line naming the failed targets, or None when all were delivered."""
    failed = [f"{r['target']}: {r['error']}" for r in results if not r["ok"]]
    return "; ".join(failed)[:1000] if failed else None


# -- taking turns ---------------------------------------------------------------------


def slots() -> int:
    """LOOPCTL_NOTIFY_SLOTS, 1-64; anything else is the default (the sender
    is detached: there is no one to tell about a typo but the log)."""
    import os

    raw = os.environ.get("LOOPCTL_NOTIFY_SLOTS", "")
    return int(raw) if raw.isascii() and raw.isdigit() and 1 <= int(raw) <= 64 else SLOTS


@contextmanager
def turn(folder: Path, limit: float) -> Iterator[str | None]:
    """Hold a sending slot for the block (None), or say why there was none:
    every slot and every waiting place is taken, or the wait outlasted what
    the deliveries ahead can take. Slots are flock()ed files, so a killed
    delivery frees its slot with its last breath."""
    from loopctl.storage.locks import LockTimeout, hold
    from loopctl.storage.paths import ensure_dir

    count = slots()
    ensure_dir(folder)
    with ExitStack() as held:
        if _first_free(held, [folder / f"slot-{n}.lock" for n in range(count)]) is None:
            with ExitStack() as waiting:  # the waiting place is given back once in a slot
                ticket = _first_free(waiting, [folder / f"wait-{n}.lock"
                                               for n in range(count * WAITING_PER_SLOT)])
                if ticket is None:
                    yield (f"dropped: {count} deliveries sending and "
                           f"{count * WAITING_PER_SLOT} waiting")
                    return
                try:  # each slot has its own queue: the deliveries ahead are bounded
                    held.enter_context(hold(folder / f"slot-{ticket % count}.lock",
                                            (WAITING_PER_SLOT + 1) * (limit + 5)))
                except LockTimeout:
                    yield "dropped: waited too long for a delivery slot"
                    return
        yield None


def _first_free(held: ExitStack, candidates: list[Path]) -> int | None:
    from loopctl.storage.locks import LockTimeout, hold

    for n, path in enumerate(candidates):
        try:
            held.enter_context(hold(path, 0))
            return n
        except LockTimeout:
            continue
    return None


def _main() -> int:
    """The delivery process: wait for a turn, send through a bounded sender,
    note each result in the run's log, and record a failure on the loop
    (shown by `status`, warned by `doctor`)."""
    from loopctl.storage.store import Store

    job = json.loads(sys.stdin.buffer.read())
    event, targets = job["event"], job["targets"]
    title, body = message(event)
    store = Store()
    limit = timeout()
    try:
        with turn(store.paths.state_dir / "notify", limit) as dropped:
            results = [{"target": mask(u), "ok": False, "error": dropped} for u in targets] \
                if dropped else send_bounded(targets, title, body, str(store.paths.state_dir),
                                             limit, kind_of(event))
    except OSError as exc:
        results = [{"target": mask(u), "ok": False,
                    "error": f"dropped: no delivery slot ({exc.strerror or exc})"}
                   for u in targets]
    if event.get("log"):
        from loopctl.storage.runs import append_to_log

        append_to_log(event["log"], b"".join(
            f"# loopctl: notify {r['target']} for {event.get('status')}: "
            f"{'ok' if r['ok'] else r['error']}\n".encode() for r in results))
    store.record_delivery(event, "notify_error", summary(results))
    return 0 if all(r["ok"] for r in results) else 1


def _send_main() -> int:
    """The sending process: one JSON line per target, as each is known."""
    job = json.loads(sys.stdin.buffer.read())
    results: list[dict[str, Any]] = []
    for url in job["targets"]:
        send([url], job["title"], job["body"], results, str(job.get("type") or "info"))
        sys.stdout.write(json.dumps({"ok": results[-1]["ok"], "error": results[-1]["error"]})
                         + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_send_main() if sys.argv[1:] == ["--send"] else _main())
