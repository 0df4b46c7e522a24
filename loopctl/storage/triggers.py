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
