"""A trigger's payload on disk (DESIGN §17).

`runs/<loop>/trigger.pending` holds the payload of the last trigger not yet
fired (the last payload wins); the claim of the fire renames it to
`runs/<loop>/<run-id>.trigger`, which the run's agent reads at
`$LOOPCTL_TRIGGER_FILE` and `--keep-runs` prunes with the run's other files.
Both are written and moved under the store lock.

A person's answer to a loop its agent blocked (`resume NAME --answer TEXT`,
DESIGN §19) takes the same way: `answer.pending`, taken by the next fire as
`<run-id>.answer`, which its agent reads at `$LOOPCTL_ANSWER_FILE`.
"""

from __future__ import annotations

import os
from pathlib import Path

from loopctl.domain.gates import MAX_PAYLOAD
from loopctl.storage.paths import Paths, read_bounded

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

PENDING = "trigger.pending"  # not a run id: no run file can have this name
ANSWER = "answer.pending"


def pending_path(paths: Paths, loop: str) -> Path:
    return paths.loop_runs_dir(loop) / PENDING


def save_pending(paths: Paths, loop: str, text: str) -> None:
    """Atomically, never through a symlink the agent left (os.replace swaps
    the name itself). Not fsynced: the accepted trigger is (in state.json),
    and a storm of triggers must not queue on two disk flushes each; a power
    cut at worst loses the payload, never the fire."""
    from loopctl.storage.atomic import atomic_write

    atomic_write(pending_path(paths, loop), text.encode(), durable=False)


def take_pending(paths: Paths, loop: str, run_id: str) -> bool:
    """Give the pending payload to the run just claimed; False if none."""
    try:
        os.replace(pending_path(paths, loop), paths.run_file(loop, run_id, ".trigger"))
    except FileNotFoundError:
        return False
    return True


def run_payload(paths: Paths, loop: str, run_id: str) -> tuple[Path, str] | None:
    """The run's payload file and its text, checked again as it is read (the
    folder is not the agent's, but a file is not trusted for being there)."""
    from loopctl.domain.errors import UsageError
    from loopctl.domain.gates import check_payload

    path = paths.run_file(loop, run_id, ".trigger")
    data = read_bounded(path, MAX_PAYLOAD + 1)
    if data is None:
        return None
    try:
        return path, check_payload(data)
    except UsageError:
        return None


def save_answer(paths: Paths, loop: str, text: str) -> None:
    """The answer the next fire takes (the last answer wins), atomically."""
    from loopctl.storage.atomic import atomic_write
    from loopctl.storage.paths import ensure_dir

    ensure_dir(paths.loop_runs_dir(loop))
    atomic_write(paths.loop_runs_dir(loop) / ANSWER, text.encode(), durable=False)


def take_answer(paths: Paths, loop: str, run_id: str) -> bool:
    """Give the pending answer to the run just claimed; False if none."""
    try:
        os.replace(paths.loop_runs_dir(loop) / ANSWER, paths.run_file(loop, run_id, ".answer"))
    except (FileNotFoundError, NotADirectoryError):
        # No answer, or no run folder (a file planted there): the run's
        # log cannot open either, and that is the loop's error, said there.
        return False
    return True


def run_answer(paths: Paths, loop: str, run_id: str) -> tuple[Path, str] | None:
    """The run's answer file and its text, checked again as it is read."""
    from loopctl.domain.errors import UsageError
    from loopctl.domain.gates import check_payload

    path = paths.run_file(loop, run_id, ".answer")
    data = read_bounded(path, MAX_PAYLOAD + 1)
    if data is None:
        return None
    try:
        return path, check_payload(data, "--answer")
    except UsageError:
        return None


def keep_text(store: Any, loop: str, kind: str, text: str) -> None:
    """Under the store lock: a trigger's payload (`kind` "trigger") or an
    answer ("answer") for the loop's next fire. In a team store it is kept
    there, so the fire takes it whichever machine fires (DESIGN §21)."""
    shared = store.shared()
    if shared is not None:
        from loopctl.storage.pg import texts

        texts.save(shared, loop, kind, text.encode())
    elif kind == "trigger":
        store.run_dir(loop)
        save_pending(store.paths, loop, text)
    else:
        save_answer(store.paths, loop, text)


def take_team_texts(store: Any, shared: Any, loop: str, run_id: str, payload: bool) -> None:
    """The fire just claimed takes the store's pending answer (and its
    payload, for a trigger's fire) into its run files, where its agent
    reads them as it would this machine's own. A text the checks refuse
    (the rows are untrusted) is dropped, as a bad file is."""
    from loopctl.storage.pg import texts

    for kind, suffix in (("trigger", ".trigger"), ("answer", ".answer")):
        if kind == "trigger" and not payload:
            continue
        data = texts.take(shared, loop, kind, MAX_PAYLOAD + 1)
        if data is not None:
            _give(store.paths, loop, run_id, suffix, data, kind)


def _give(paths: Paths, loop: str, run_id: str, suffix: str, data: bytes, kind: str) -> None:
    from loopctl.domain.errors import UsageError
    from loopctl.domain.gates import check_payload
    from loopctl.storage.atomic import atomic_write
    from loopctl.storage.paths import ensure_dir

    try:
        text = check_payload(data, "--answer" if kind == "answer" else "--payload")
        ensure_dir(paths.loop_runs_dir(loop))
        atomic_write(paths.run_file(loop, run_id, suffix), text.encode(), durable=False)
    except (UsageError, OSError):
        return  # a bad text, or no run folder: the run's log says the folder's error
