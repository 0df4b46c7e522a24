"""Errors that reach the user as one line and a documented exit code."""

from __future__ import annotations

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

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


def shorten(value: Any, limit: int = 60) -> str:
    """A bad value, safe to quote in a note."""
    shown = repr(value)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def near_miss(word: str, choices: Iterable[str]) -> str:
    """` (did you mean 'max_runs'?)` for a near miss of one of `choices`;
    empty when none is near."""
    import difflib

    best = difflib.get_close_matches(word, sorted(choices), 1, 0.75)
    return f" (did you mean {best[0]!r}?)" if best else ""
