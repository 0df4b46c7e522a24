"""The files a run leaves beside its record and log, written here so that
only storage writes loopctl's files (DESIGN §10): the prompt the agent reads,
the markers that say a run's state could not be saved and why, the decision folder
the agent may write, and the `loopctl` shim on the agent's PATH."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from loopctl.storage.paths import FILE_MODE, Paths, ensure_dir


def write_prompt(paths: Paths, loop: str, run_id: str, text: str) -> Path:
    """loopctl's copy of the text sent to the agent (`{prompt_file}`): the
    agent reads the copy, never the user's path."""
    path = paths.run_file(loop, run_id, ".prompt")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    return path


# A run's `.fault` holds this many bytes, written before the run starts:
# saying why its supervisor could not write rewrites them in place, and so
# needs no free block on a full disk (an empty `.unsaved` made then needs
# none either, but its reason does, and a disk that just filled has none).
FAULT_BYTES = 512
# Write errors that mean the home itself cannot be written: named in the
# reason by their errno symbol too (`ENOSPC`), which users search for.
DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG)


def reserve_fault(paths: Paths, loop: str, run_id: str) -> None:
    """Before a run starts: its `.fault`, FAULT_BYTES of blanks (nothing to
    say yet). One a supervisor already left is kept as it is."""
    try:
        fd = os.open(paths.run_file(loop, run_id, ".fault"),
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     FILE_MODE)
    except OSError:
        return
    try:
        os.write(fd, b" " * (FAULT_BYTES - 1) + b"\n")
    except OSError:
        pass
    finally:
        os.close(fd)


def mark_unsaved(paths: Paths, loop: str, run_id: str, message: str) -> None:
    """Leave what the next driver finds: this run's state could not be
    saved, and why. Into the reserved `.fault` in place when there is one
    (no new block needed); else an `.unsaved` marker, whose empty file
    needs no block either. Every failure is swallowed (the disk is why we
    are here)."""
    text = message.encode()[:FAULT_BYTES - 1]
    try:
        fd = os.open(paths.run_file(loop, run_id, ".fault"), os.O_WRONLY | os.O_NOFOLLOW)
        try:
            if os.fstat(fd).st_size >= FAULT_BYTES and \
                    os.pwrite(fd, text.ljust(FAULT_BYTES - 1) + b"\n", 0) == FAULT_BYTES:
                return
        finally:
            os.close(fd)
    except OSError:
        pass
    try:
        fd = os.open(paths.unsaved_marker(loop, run_id),
                     os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
        try:
            os.write(fd, text)
        except OSError:
            pass
        os.close(fd)
    except OSError:
        pass


def unsaved_reason(paths: Paths, loop: str, run_id: str) -> str | None:
    """Why a run's state could not be saved, as its supervisor left it
    (`mark_unsaved`), in one line; None: it left nothing to say. A blank
    `.fault` (the run ended before saying anything) is removed."""
    from loopctl.domain.untrusted import line
    from loopctl.storage.paths import read_bounded

    marker = paths.unsaved_marker(loop, run_id)
    fault = paths.run_file(loop, run_id, ".fault")
    for path in (fault, marker):
        data = read_bounded(path, 4 * FAULT_BYTES)
        if data is None:
            continue
        text = line(data.decode(errors="replace")).strip()
        if text:
            return text[:FAULT_BYTES]
        if path == marker:
            return "state could not be saved"
    try:
        fault.unlink()
    except OSError:
        pass
    return None


def drop_fault(paths: Paths, loop: str, run_id: str) -> None:
    """The run settled: nothing for its `.fault` to say."""
    try:
        paths.run_file(loop, run_id, ".fault").unlink()
    except OSError:
        pass


def disk_fault(exc: BaseException) -> str | None:
    """What to leave in `.fault` for an error that stopped a supervisor:
    one that says the home cannot be written (ENOSPC, EROFS ...), with the
    errno's symbol; None for any other error (the run was not lost to the
    disk). LoopctlError hides its OSError (`from None`): its text tells."""
    from loopctl.domain.errors import LoopctlError

    if isinstance(exc, OSError):
        if exc.errno not in DISK_ERRNOS:
            return None
        text = f"cannot write: {exc.strerror or exc}"
        return f"{text} ({errno.errorcode[exc.errno]})"
    if isinstance(exc, LoopctlError):
        for code in DISK_ERRNOS:
            if os.strerror(code) in exc.message:
                return f"{exc.message} ({errno.errorcode[code]})"
    return None


def remove_decision_dir(folder: Path) -> None:
    """An empty folder (most runs leave nothing) without importing shutil,
    whose rmtree (it follows no symlink the agent left there) does the rest."""
    try:
        os.rmdir(folder)
    except FileNotFoundError:
        pass
    except OSError:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


def install_shim(paths: Paths, body: str) -> Path:
    """`<state>/bin/loopctl`, rewritten only when its text changed; returns
    its folder, which goes first on the agent's PATH."""
    folder = ensure_dir(paths.state_dir / "bin")
    shim = folder / "loopctl"
    try:
        current = shim.read_text()
    except OSError:
        current = None
    if current != body:
        from loopctl.storage.atomic import atomic_write

        atomic_write(shim, body.encode())
        os.chmod(shim, 0o700)
    return folder
