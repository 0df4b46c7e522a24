"""What a daemon that cannot write says to `doctor` and `ls`.

A daemon whose pass cannot write `state.json` (a full disk, a read-only
remount) keeps running and retries; `doctor` and `ls`, separate processes,
must still learn why nothing fires. The place it says so must be writable
when nothing else is: `<state>/daemon.note` is made at the daemon's start
at its full size (NOTE_SIZE bytes) and only ever rewritten in place, so
writing it takes no new block of a full file system. It holds one JSON
object padded with spaces: the daemon's `{pid, ct}`, the error and since
when; an empty error means it writes again. A note whose daemon is gone
says nothing (a stale note is never shown).
"""

from __future__ import annotations

import json
import os

from loopctl.storage.paths import Paths

TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Any

NOTE_SIZE = 1024
MAX_ERROR = 400  # characters of the error kept: the note must fit NOTE_SIZE


def note_path(paths: Paths) -> Any:
    return paths.state_dir / "daemon.note"


def prepare(paths: Paths, proc: dict[str, Any]) -> None:
    """Made (or remade) at full size with no error, by a daemon starting.
    Best effort: a home that cannot take it now has the note missing, and
    the daemon's own log still says why."""
    from loopctl.storage.atomic import atomic_write

    try:
        atomic_write(note_path(paths), _payload(proc, "", 0.0))
    except Exception:  # noqa: BLE001 - a note is never worth a daemon
        pass


def say(paths: Paths, proc: dict[str, Any], error: str, since: float) -> bool:
    """Rewrite the note in place (no new block): `error`, or "" once the
    daemon writes again. False when the note could not be written."""
    try:
        fd = os.open(note_path(paths), os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if os.fstat(fd).st_size != NOTE_SIZE:
            return False  # not the note prepare made: never grown here
        os.pwrite(fd, _payload(proc, error, since), 0)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _payload(proc: dict[str, Any], error: str, since: float) -> bytes:
    body = json.dumps({"pid": proc["pid"], "ct": proc["ct"], "error": error[:MAX_ERROR],
                       "since": since}).encode("utf-8", "replace")
    if len(body) > NOTE_SIZE:  # a long non-ASCII error: its start is enough
        return _payload(proc, error[:MAX_ERROR // 4], since)
    return body.ljust(NOTE_SIZE, b" ")


def read_error(paths: Paths) -> dict[str, Any] | None:
    """`{error, since, pid}` of a live daemon that cannot write now, else
    None (no note, a note gone bad, its daemon gone, or no error)."""
    from loopctl.domain import untrusted
    from loopctl.storage.proc_identity import alive
    from loopctl.storage.safe_open import Refused, read_file

    try:
        data = read_file(str(note_path(paths)), NOTE_SIZE, whole=True)
        note = json.loads(data) if data else None
    except (Refused, OSError, ValueError, RecursionError, UnicodeDecodeError):
        return None
    if not isinstance(note, dict):
        return None
    error = untrusted.text(note.get("error"), MAX_ERROR)
    since = untrusted.moment(note.get("since"))
    pid, ct = note.get("pid"), untrusted.moment(note.get("ct"))
    if not error or since is None or ct is None or not isinstance(pid, int) \
            or isinstance(pid, bool) or not 0 < pid < 2**22:
        return None
    if not alive({"pid": pid, "ct": ct}):
        return None
    return {"error": untrusted.line(error), "since": since, "pid": pid}
