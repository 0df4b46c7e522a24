"""Telling a human through Apprise (DESIGN §13): one notification per
attention event and target, delivered by a detached process so a slow or
dead service never delays a run, never fails it and never changes the loop.

Notification URLs carry tokens (`slack://T0/B0/secret`): they are stored only
in `loops.yaml` (0600) and in the claimed run, and shown everywhere else as
`slack://****`. Apprise itself is imported only by the delivery process and
the commands that send (`notify test`, `digest --notify`, `doctor
--notify`): the `tick` and `ls` paths never load it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterable
from typing import Any

from loopctl.domain.errors import UsageError

DELIVERY_TIMEOUT = 30.0
_URL = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]{0,31})://[^\s'\"<>]+")


def mask(url: str) -> str:
    """`slack://****`: the scheme says where, nothing says how to post."""
    scheme, sep, _ = url.partition("://")
    if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]{0,31}", scheme):
        return f"{scheme}://****"
    return "****"


def mask_text(text: str) -> str:
    """Every URL inside `text` masked (Apprise's log lines quote them)."""
    return _URL.sub(lambda m: f"{m.group(1)}://****", text)


def check_urls(urls: Iterable[str]) -> list[str]:
    """Apprise's own parser on each URL; the first it cannot use is an error
    (exit 2) that names it, masked."""
    import apprise

    checked = []
    for url in urls:
        if url == "none":
            continue
        if not apprise.Apprise().add(url):
            raise UsageError(f"bad --notify {mask(url)}: Apprise does not understand this URL; "
                             "expected one like slack://..., ntfy://topic, mailto://..., "
                             "json://host:port/path (see Apprise's service list)")
        checked.append(url)
    return checked


def targets_for(loop_notify: Iterable[str], global_notify: object) -> list[str]:
    """The loop's targets and those of every loop (top-level `notify:`)."""
    shared = [global_notify] if isinstance(global_notify, str) else \
        global_notify if isinstance(global_notify, list) else []
    return list(dict.fromkeys([*loop_notify, *(u for u in shared if isinstance(u, str))]))


def message(event: dict[str, Any]) -> tuple[str, str]:
    """Title and body of the notification for an attention event."""
    reason = f" ({event['reason']})" if event.get("reason") else ""
    title = f"loopctl: {event.get('loop')} {event.get('status')}{reason}"
    evidence = event.get("evidence") or {}
    lines = [str(event.get("summary") or "")]
    if isinstance(evidence, dict) and evidence.get("text"):
        lines.append(f"Evidence ({evidence.get('source', 'loopctl')}): {evidence['text']}")
    facts = [("Run", event.get("run_id")), ("Iteration", _of(event)),
             ("Cost", _cost(event.get("cost_usd"))), ("Branch", event.get("branch")),
             ("Pull request", event.get("pr")), ("Log", event.get("log"))]
    lines += [f"{label}: {value}" for label, value in facts if value]
    return title, "\n".join(line for line in lines if line)[:4000]


def _of(event: dict[str, Any]) -> str | None:
    if event.get("iteration") is None:
        return None
    limit = event.get("max_runs")
    return f"{event['iteration']}/{limit}" if limit else str(event["iteration"])


def _cost(value: object) -> str | None:
    return f"${value:.4f}" if isinstance(value, (int, float)) and value else None


# -- sending ------------------------------------------------------------------------


def send(targets: Iterable[str], title: str, body: str,
         results: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Send to each target on its own; one result per target, masked,
    appended to `results` as each one is known."""
    import logging

    import apprise

    results = [] if results is None else results
    for url in targets:
        hub = apprise.Apprise()
        with apprise.LogCapture(level=logging.WARNING, fmt="%(message)s") as log:
            ok = bool(hub.add(url)) and bool(hub.notify(title=title, body=body))
            detail = log.getvalue().strip().splitlines() if not ok else []
        error = None if ok else mask_text(detail[-1] if detail else "not delivered")[:300]
        results.append({"target": mask(url), "ok": ok, "error": error})
    return results


def deliver_detached(event: dict[str, Any], targets: list[str], folder: str) -> str | None:
    """Start a delivery process for one event; the error if it cannot start.
    Event and URLs travel on its stdin through an unnamed 0600 file: never
    in argv, where `ps` shows them to every user."""
    import tempfile

    try:
        with tempfile.TemporaryFile(dir=folder) as body:
            body.write(json.dumps({"event": event, "targets": targets}).encode())
            body.seek(0)
            # cwd: `-m` puts the working directory first on sys.path, and the
            # driver's may hold anyone's `apprise.py`; the state dir is ours.
            subprocess.Popen([sys.executable, "-m", "loopctl.integrations.notify"], stdin=body,
                             cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True, close_fds=True)
    except OSError as exc:
        return f"notification delivery could not start: {exc.strerror or exc}"
    return None


def summary(results: list[dict[str, Any]]) -> str | None:
    """One line naming the failed targets, or None when all were delivered."""
    failed = [f"{r['target']}: {r['error']}" for r in results if not r["ok"]]
    return "; ".join(failed)[:1000] if failed else None


def _timed_out(_signum: int, _frame: Any) -> None:
    raise TimeoutError


def _main() -> int:
    """The delivery process: send, note each result in the run's log, and
    record a failure on the loop (shown by `status`, warned by `doctor`)."""
    import signal

    from loopctl.storage.store import Store

    job = json.loads(sys.stdin.buffer.read())
    event, targets = job["event"], job["targets"]
    title, body = message(event)
    signal.signal(signal.SIGALRM, _timed_out)
    signal.alarm(int(DELIVERY_TIMEOUT))
    results: list[dict[str, Any]] = []
    try:
        send(targets, title, body, results)
    except TimeoutError:
        results += [{"target": mask(u), "ok": False,
                     "error": f"timed out after {DELIVERY_TIMEOUT:g}s"}
                    for u in targets[len(results):]]
    finally:
        signal.alarm(0)
    if event.get("log"):
        from loopctl.storage.runs import append_to_log

        append_to_log(event["log"], b"".join(
            f"# loopctl: notify {r['target']} for {event.get('status')}: "
            f"{'ok' if r['ok'] else r['error']}\n".encode() for r in results))
    Store().record_delivery(event, "notify_error", summary(results))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(_main())
