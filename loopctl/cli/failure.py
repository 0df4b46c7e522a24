"""The one error path of every entry point: what the user sees of a failure."""

from __future__ import annotations

import os
import sys

from loopctl.domain.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, LoopctlError


def report(exc: BaseException) -> int:
    """The one error path of every entry point: one line on stderr and the
    documented exit code; a traceback only with LOOPCTL_DEBUG=1."""
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
