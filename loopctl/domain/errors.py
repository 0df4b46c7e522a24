"""Errors that reach the user as one line and a documented exit code."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREADABLE = 3
EXIT_NO_SUCH_LOOP = 4
EXIT_BUSY = 75
EXIT_TIMEOUT = 124
EXIT_INTERRUPTED = 130


class LoopctlError(Exception):
    """An error the user can act on; `code` is the process exit code."""

    code = EXIT_FAILED

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self.args[0])


class UsageError(LoopctlError):
    code = EXIT_USAGE


class UnreadableError(LoopctlError):
    code = EXIT_UNREADABLE


class NoSuchLoop(LoopctlError):
    code = EXIT_NO_SUCH_LOOP

    def __init__(self, name: str) -> None:
        super().__init__(f"no such loop: {name!r} (see `loopctl ls`)")


class BusyError(LoopctlError):
    code = EXIT_BUSY


class NotFiring(LoopctlError):
    """A scheduled fire that the loop's state says to skip: not a failure."""

    code = EXIT_OK


def report(exc: BaseException) -> int:
    """The one error path of every entry point: one line on stderr and the
    documented exit code; a traceback only with LOOPCTL_DEBUG=1."""
    import os
    import sys

    if isinstance(exc, LoopctlError):
        label = "" if exc.code == EXIT_OK else "error: "
        print(f"loopctl: {label}{exc.message}", file=sys.stderr)
        return exc.code
    if isinstance(exc, KeyboardInterrupt):
        print("loopctl: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    if isinstance(exc, BrokenPipeError):
        return EXIT_OK  # `loopctl ls | head`: the reader left, nothing is wrong
    if os.environ.get("LOOPCTL_DEBUG"):
        raise exc
    print(f"loopctl: unexpected error: {type(exc).__name__}: {str(exc)[:300]} "
          "(set LOOPCTL_DEBUG=1 for a traceback)", file=sys.stderr)
    return EXIT_FAILED
